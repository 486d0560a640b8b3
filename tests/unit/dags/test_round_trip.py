"""The alerting DAG's last step: a deferral only a triggerer that runs triggers answers."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk.exceptions import TaskDeferred

from airflow_crashsafe.dags.alerting import AlertingSettings
from airflow_crashsafe.dags.round_trip import ROUND_TRIP_TIMEOUT, TriggererRoundTrip
from airflow_crashsafe.testing import fake_context
from tests.support.airflow_health import health_body
from tests.support.httpserver import Reply, serve


@pytest.fixture(autouse=True)
def _no_api_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """No crashsafe_api connection: the health endpoint is the api_url each test gives."""
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_API", raising=False)


def _step(**settings: Any) -> TriggererRoundTrip:
    return TriggererRoundTrip(task_id="triggerer_round_trip", settings=AlertingSettings(**settings))


def _defers(step: TriggererRoundTrip) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        step.execute(fake_context())
    return deferred.value


def test_expecting_a_triggerer_it_defers_on_a_short_timer_with_a_timeout() -> None:
    """expect_triggerer="yes": a one-second DateTimeTrigger resumed by came_back, bounded by a timeout."""
    deferred = _defers(_step(expect_triggerer="yes"))
    assert isinstance(deferred.trigger, DateTimeTrigger)
    assert deferred.method_name == "came_back"
    assert deferred.timeout == ROUND_TRIP_TIMEOUT
    assert _step().came_back(fake_context(), {"status": "success"}) == "ok"


def test_expecting_no_triggerer_it_returns_at_once() -> None:
    """expect_triggerer="no": nothing to prove, the step succeeds without deferring."""
    assert _step(expect_triggerer="no").execute(fake_context()) == "skipped"


@pytest.mark.parametrize(
    ("body", "defers"),
    [
        pytest.param({"triggerer": None}, False, id="never-ran"),
        pytest.param({"triggerer": "healthy"}, True, id="heartbeating"),
        pytest.param({"triggerer": "unhealthy", "triggerer_age": 300.0}, True, id="dead"),
        pytest.param(None, True, id="unreadable"),
    ],
)
def test_auto_defers_when_the_api_server_knows_a_triggerer(body: Any, defers: bool) -> None:
    """expect_triggerer="auto": no triggerer ever ran -> no round trip; any other answer -> defer."""
    answer = "<html>not health</html>" if body is None else health_body(**body)
    with serve(lambda _r: Reply(200, answer)) as api:
        step = _step(expect_triggerer="auto", api_url=api.url, request_timeout=2)
        if defers:
            assert isinstance(_defers(step).trigger, DateTimeTrigger)
        else:
            assert step.execute(fake_context()) == "skipped"
    assert [r.path for r in api.requests] == ["/api/v2/monitor/health"]
