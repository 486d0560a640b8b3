"""SchedulerHeartbeatSensor.poke against a real HTTP server serving health JSON we control."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_crashsafe.sensors import SchedulerHeartbeatSensor
from airflow_crashsafe.testing import fake_context
from tests.support.httpserver import Reply, serve

pytestmark = pytest.mark.floor  # CI's floor subset (docs/packaging.md, "Version floor")


def health(
    scheduler_age: float | None,
    *,
    scheduler: str = "healthy",
    triggerer: str | None = None,
    dag_processor_age: float | None = None,
) -> dict[str, Any]:
    """A body shaped like Airflow 3.3's HealthInfoResponse, heartbeats ``age`` seconds old."""
    now = datetime.now(timezone.utc)

    def iso(age: float | None) -> str | None:
        return (now - timedelta(seconds=age)).isoformat() if age is not None else None

    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": scheduler, "latest_scheduler_heartbeat": iso(scheduler_age)},
        "triggerer": {"status": triggerer, "latest_triggerer_heartbeat": iso(2) if triggerer else None},
        "dag_processor": {
            "status": "healthy" if dag_processor_age is not None else None,
            "latest_dag_processor_heartbeat": iso(dag_processor_age),
        },
    }


def sensor(url: str, **kwargs: Any) -> SchedulerHeartbeatSensor:
    """A sensor aimed at ``url`` with a short request timeout."""
    return SchedulerHeartbeatSensor(task_id="gate", api_url=url, request_timeout=2, **kwargs)


def test_poke_true_on_fresh_scheduler_heartbeat() -> None:
    """A healthy scheduler with a 3-s-old heartbeat opens the gate, read from /api/v2/monitor/health."""
    with serve(lambda _r: Reply(200, health(3))) as server:
        assert sensor(server.url).poke(fake_context()) is True
    assert [r.path for r in server.requests] == ["/api/v2/monitor/health"]


def test_poke_false_while_scheduler_stale_then_true(capsys: pytest.CaptureFixture[str]) -> None:
    """A stale heartbeat keeps the gate shut and says why; a fresh one opens it."""
    with serve(lambda _r: Reply(200, health(20))) as server:
        gate = sensor(server.url, threshold_seconds=10)
        assert gate.poke(fake_context()) is False
        # Task loggers are structlog in Airflow 3: the reason goes to the task log (stdout here).
        assert "newest heartbeat 20 s ago (threshold 10 s)" in capsys.readouterr().out
        server.answer(lambda _r: Reply(200, health(1)))
        assert gate.poke(fake_context()) is True


def test_poke_false_when_airflow_reports_scheduler_unhealthy() -> None:
    """Airflow's own unhealthy verdict (a dead job row) shuts the gate even with a fresh-looking beat."""
    with serve(lambda _r: Reply(200, health(2, scheduler="unhealthy"))) as server:
        assert sensor(server.url).poke(fake_context()) is False


def test_optional_components_must_be_alive_when_listed() -> None:
    """Listing the triggerer and dag-processor requires them alive; absent ones shut the gate."""
    with serve(lambda _r: Reply(200, health(2))) as server:
        gate = sensor(server.url, components=["scheduler", "triggerer", "dag-processor"])
        assert gate.poke(fake_context()) is False
        server.answer(lambda _r: Reply(200, health(2, triggerer="healthy", dag_processor_age=4)))
        assert gate.poke(fake_context()) is True


def test_unreachable_or_broken_api_server_keeps_gate_shut() -> None:
    """A closed port, an HTTP 500 and a non-health body never open the gate and never raise."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    assert sensor(closed).poke(fake_context()) is False
    with serve(lambda _r: Reply(500, {"detail": "boom"})) as server:
        assert sensor(server.url).poke(fake_context()) is False
        server.answer(lambda _r: Reply(200, {"hello": "world"}))
        assert sensor(server.url).poke(fake_context()) is False


def test_rendered_template_values_are_checked_at_poke() -> None:
    """Rendered strings work ("20", "scheduler,triggerer"); a rendered typo raises a clear error."""
    with serve(lambda _r: Reply(200, health(5, triggerer="healthy"))) as server:
        gate = sensor(server.url, threshold_seconds="{{ t }}", components="{{ c }}")
        gate.threshold_seconds, gate.components = "20", "scheduler,triggerer"
        assert gate.poke(fake_context()) is True
        gate.components = "scheduler,trigerer"
        with pytest.raises(ValueError, match="unknown component 'trigerer'"):
            gate.poke(fake_context())
