"""A re-run finding its predecessor's unit in flight defers only while a triggerer heartbeats.

Real PostgreSQL 15 holds try 1's unit open (``counted_work`` sleeps inside it); the api-server's
``/api/v2/monitor/health`` is a real local HTTP server answering Airflow 3.3.2's JSON shape.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.testing.context import fake_context
from airflow_crashsafe.triggers.unit import UnitEndTrigger
from tests.support.adoption import DAY, executions, in_thread, overwrite_op, setup, wait_running
from tests.support.airflow_health import api_server_health, health_body
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

#: health_body() arguments of an api-server reporting no live triggerer.
NO_TRIGGERER: dict[str, dict[str, Any]] = {
    "never-ran": {"triggerer": None},
    "unhealthy": {"triggerer": "unhealthy", "triggerer_age": 300.0},
    "stale": {"triggerer": "healthy", "triggerer_age": 600.0},
}
ROWS = [(DAY, "eu", 10), (DAY, "us", 10)]


def _try_2() -> dict[str, Any]:
    return fake_context(task_id="load_revenue", try_number=2, ti_id="ti-2")


def _try_1_running(target: SqlTarget, seconds: float) -> tuple[threading.Thread, dict[str, Any]]:
    """Try 1 running its load in a thread, its unit in flight server-side for ``seconds``."""
    setup(target)
    running = in_thread(
        overwrite_op(target, seconds), fake_context(task_id="load_revenue", try_number=1, ti_id="ti-1")
    )
    wait_running(target.url)
    return running


@pytest.mark.parametrize("body", NO_TRIGGERER.values(), ids=NO_TRIGGERER.keys())
def test_without_a_triggerer_the_rerun_waits_in_the_worker_and_adopts(
    pg_target: SqlTarget,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    body: dict[str, Any],
) -> None:
    """No live triggerer: try 2 does not defer, polls the unit's end in the worker and adopts its commit."""
    thread, outcome = _try_1_running(pg_target, 3.0)
    with (
        api_server_health(monkeypatch, health_body(**body)) as api,
        caplog.at_level(logging.INFO, "airflow_crashsafe"),
    ):
        started = time.monotonic()
        result = overwrite_op(pg_target, 3.0).execute(_try_2())
        waited = time.monotonic() - started
    thread.join(10)
    assert outcome.get("result", {}).get("rows") == 2, outcome
    assert result["adopted"] is True
    assert "try 1 (ti ti-1" in result["committed_by"]
    assert executions(pg_target) == 1
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == ROWS
    assert pg_target.committed_try("revenue") == 1
    assert "adoption_without_triggerer='wait': waiting in this worker" in caplog.text
    assert 0.5 < waited < 15
    assert [r.path for r in api.requests] == ["/api/v2/monitor/health"]  # one GET, then cached


def test_with_an_unreachable_api_server_the_rerun_waits_in_the_worker(
    pg_target: SqlTarget, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Health unknown (closed port) counts as no triggerer: the re-run waits here, never defers blindly."""
    thread, outcome = _try_1_running(pg_target, 2.0)
    with api_server_health(monkeypatch, health_body()) as api:
        api.stop()
        with caplog.at_level(logging.INFO, "airflow_crashsafe"):
            result = overwrite_op(pg_target, 2.0).execute(_try_2())
    thread.join(10)
    assert outcome.get("result", {}).get("rows") == 2, outcome
    assert result["adopted"] is True
    assert executions(pg_target) == 1
    assert "health unknown" in caplog.text


def test_take_over_without_a_triggerer_cancels_the_unit_and_redoes_the_work(
    pg_target: SqlTarget, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """adoption_without_triggerer="take_over": try 1's unit is cancelled (FencedOut) and try 2 loads now."""
    thread, outcome = _try_1_running(pg_target, 60.0)
    with api_server_health(monkeypatch, health_body(triggerer=None)), caplog.at_level(logging.INFO):
        started = time.monotonic()
        result = overwrite_op(pg_target, 0.1, adoption_without_triggerer="take_over").execute(_try_2())
        took = time.monotonic() - started
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), FencedOut), outcome
    assert result["skipped"] is False
    assert not result.get("adopted")
    assert result["rows"] == 2
    assert executions(pg_target) == 2
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == ROWS
    assert pg_target.committed_try("revenue") == 2
    assert "adoption_without_triggerer='take_over': cancelling the unit" in caplog.text
    assert took < 10


def test_the_option_chooses_take_over_when_the_operator_does_not(
    pg_target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[crashsafe] adoption_without_triggerer = take_over applies to operators that do not say."""
    thread, outcome = _try_1_running(pg_target, 60.0)
    with api_server_health(monkeypatch, health_body(triggerer=None)):
        monkeypatch.setenv("AIRFLOW__CRASHSAFE__ADOPTION_WITHOUT_TRIGGERER", "take_over")
        result = overwrite_op(pg_target, 0.1).execute(_try_2())
    thread.join(10)
    assert isinstance(outcome.get("error"), FencedOut), outcome
    assert result["rows"] == 2
    assert pg_target.committed_try("revenue") == 2


def test_with_a_heartbeating_triggerer_the_rerun_defers_with_a_check_in(
    pg_target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Healthy triggerer: try 2 defers; its trigger checks in after 300 s, the deferral times out at 600 s."""
    thread, _ = _try_1_running(pg_target, 3.0)
    healthy = health_body(triggerer="healthy", triggerer_age=3.0)
    with api_server_health(monkeypatch, healthy), pytest.raises(TaskDeferred) as deferred:
        overwrite_op(pg_target, 3.0, adoption_timeout=3600).execute(_try_2())
    thread.join(10)
    trigger = deferred.value.trigger
    assert isinstance(trigger, UnitEndTrigger)
    assert deferred.value.method_name == "resume_after_unit"
    assert deferred.value.timeout is not None
    assert deferred.value.timeout.total_seconds() == 600  # twice [crashsafe] triggerer_answer_seconds
    assert trigger.check_in_at is not None
    assert abs(trigger.check_in_at - time.time() - 300) < 10
    assert abs(trigger.deadline - time.time() - 3600) < 10


def test_a_wait_shorter_than_a_check_in_defers_until_its_deadline(
    pg_target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Less adoption time left than one check-in: no check-in; timeout = the time left + one answer time."""
    thread, _ = _try_1_running(pg_target, 3.0)
    healthy = health_body(triggerer="healthy", triggerer_age=3.0)
    with api_server_health(monkeypatch, healthy), pytest.raises(TaskDeferred) as deferred:
        overwrite_op(pg_target, 3.0, adoption_timeout=120).execute(_try_2())
    thread.join(10)
    assert deferred.value.trigger.check_in_at is None
    assert deferred.value.timeout is not None
    assert 410 <= deferred.value.timeout.total_seconds() <= 420


def test_a_check_in_while_the_unit_runs_defers_again(pg_target: SqlTarget) -> None:
    """The trigger fires check_in while the unit still runs; the resumed task defers anew, same deadline."""
    thread, outcome = _try_1_running(pg_target, 30.0)
    rerun = overwrite_op(pg_target, 0.1, adoption_timeout=3600)
    with pytest.raises(TaskDeferred) as first:
        rerun.execute(_try_2())
    trigger = first.value.trigger
    due = UnitEndTrigger(conn_id=trigger.conn_id, lock=trigger.lock, deadline=trigger.deadline, check_in_at=0)
    assert due.check() == {"status": "check_in"}
    due.close()
    kwargs = first.value.kwargs or {}
    with pytest.raises(TaskDeferred) as again:
        rerun.resume_after_unit(_try_2(), event={"status": "check_in"}, **kwargs)
    assert again.value.trigger.deadline == trigger.deadline
    pg_target.run(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'DO %%counted_work%%'"
    )
    thread.join(10)
    assert "error" in outcome


@pytest.mark.parametrize("policy", ["wait", "take_over"])
def test_a_deferral_left_unanswered_goes_on_without_the_triggerer(
    pg_target: SqlTarget, caplog: pytest.LogCaptureFixture, policy: str
) -> None:
    """Deferral timed out (triggerer heartbeating, running nothing): wait here or take over, logged."""
    thread, outcome = _try_1_running(pg_target, 4.0 if policy == "wait" else 60.0)
    rerun = overwrite_op(pg_target, 0.1, adoption_timeout=600, adoption_without_triggerer=policy)
    with pytest.raises(TaskDeferred):
        rerun.execute(_try_2())
    with caplog.at_level(logging.INFO, "airflow_crashsafe"):
        started = time.monotonic()
        result = rerun.resume_execution("__fail__", {"error": "Trigger timeout"}, _try_2())
        took = time.monotonic() - started
    thread.join(10)
    assert "did not answer the last deferral within 600 s: stalled?" in caplog.text
    assert took < 20
    if policy == "wait":
        assert "adoption_without_triggerer='wait': waiting in this worker" in caplog.text
        assert outcome.get("result", {}).get("rows") == 2, outcome
        assert result["adopted"] is True
        assert executions(pg_target) == 1
        assert pg_target.committed_try("revenue") == 1
    else:
        assert "adoption_without_triggerer='take_over': cancelling the unit" in caplog.text
        assert isinstance(outcome.get("error"), FencedOut), outcome
        assert result["rows"] == 2
        assert pg_target.committed_try("revenue") == 2
