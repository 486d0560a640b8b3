"""Watchdog decisions against a real local HTTP server serving health JSON we control."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.alerting import Dispatcher
from airflow_crashsafe.testing.alerts import RecordingSink
from airflow_crashsafe.watchdog.api import ApiSource
from airflow_crashsafe.watchdog.loop import Watchdog
from airflow_crashsafe.watchdog.rules import Rules
from airflow_crashsafe.watchdog.state import StateFile
from tests.support.httpserver import Recorded, Reply, serve

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def health(beat: datetime | None, status: str = "healthy", triggerer: str | None = None) -> dict[str, Any]:
    """A body shaped exactly like Airflow 3.3's HealthInfoResponse."""
    iso = beat.isoformat() if beat else None
    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": status, "latest_scheduler_heartbeat": iso},
        "triggerer": {"status": triggerer, "latest_triggerer_heartbeat": iso if triggerer else None},
        "dag_processor": {"status": None, "latest_dag_processor_heartbeat": None},
    }


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def make(url: str, tmp_path: Path, clock: Clock, sink: RecordingSink, **kwargs: Any) -> Watchdog:
    """A watchdog on ``url`` with a fake clock, a capturing sink and a state file in tmp_path."""
    source = ApiSource(url, timeout=2, **kwargs.pop("source", {}))
    rules = Rules(
        grace=kwargs.pop("grace", 20), repeat_interval=kwargs.pop("repeat", 600), instance="t", **kwargs
    )
    return Watchdog(source, rules, Dispatcher([sink]), StateFile(tmp_path / "state.json"), clock=clock)


def events(sink: RecordingSink) -> list[tuple[str, str, str]]:
    return [(a.event, a.dedup_key.split(":", 2)[2].rsplit(":", 1)[0], a.severity) for a in sink.alerts]


def test_fresh_heartbeat_is_healthy(tmp_path: Path) -> None:
    """A healthy status with a fresh heartbeat raises nothing."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: Reply(200, health(clock.now - timedelta(seconds=3)))) as server:
        dog = make(server.url, tmp_path, clock, sink)
        for _ in range(5):
            dog.tick()
            clock.advance(10)
    assert sink.alerts == []
    assert dog.incidents == {}


def test_dead_scheduler_pages_once_repeats_and_resolves(tmp_path: Path) -> None:
    """A dead scheduler pages after the grace, once, repeats at the interval, and resolves on recovery."""
    clock, sink = Clock(), RecordingSink("capture")
    last_beat = T0 - timedelta(seconds=31)
    with serve(lambda _r: Reply(200, health(last_beat, "unhealthy"))) as server:
        dog = make(server.url, tmp_path, clock, sink)
        dog.tick()
        assert sink.alerts == []  # within grace
        for _ in range(3):
            clock.advance(10)
            dog.tick()
        assert events(sink) == [("trigger", "scheduler_dead", "critical")]
        assert sink.alerts[0].began_at == last_beat  # began when the heartbeats stopped
        assert "running_tasks" in sink.alerts[0].details
        clock.advance(600)
        dog.tick()
        assert events(sink)[-1][0] == "repeat"
        server.answer(lambda _r: Reply(200, health(clock.now)))
        clock.advance(10)
        dog.tick()
    assert events(sink)[-1] == ("resolve", "scheduler_dead", "critical")
    assert len({a.dedup_key for a in sink.alerts}) == 1


def test_stale_heartbeat_with_healthy_status_is_dead(tmp_path: Path) -> None:
    """Our own threshold applies even when the body still says healthy (a cached or skewed answer)."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: Reply(200, health(T0 - timedelta(seconds=45)))) as server:
        dog = make(server.url, tmp_path, clock, sink, grace=0)
        dog.tick()
    assert events(sink) == [("trigger", "scheduler_dead", "critical")]


def test_restart_within_grace_does_not_page(tmp_path: Path) -> None:
    """Unhealthy for less than the grace, then healthy again: nothing is sent."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: Reply(200, health(T0 - timedelta(seconds=40), "unhealthy"))) as server:
        dog = make(server.url, tmp_path, clock, sink, grace=30)
        dog.tick()
        clock.advance(10)
        dog.tick()
        server.answer(lambda _r: Reply(200, health(clock.now)))
        clock.advance(10)
        dog.tick()
    assert sink.alerts == []
    assert dog.incidents == {}


def test_open_incident_survives_watchdog_restart(tmp_path: Path) -> None:
    """A restarted watchdog neither pages again for an open incident nor forgets to resolve it."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: Reply(200, health(T0 - timedelta(seconds=60), "unhealthy"))) as server:
        make(server.url, tmp_path, clock, sink, grace=0).tick()
        clock.advance(10)
        restarted = make(server.url, tmp_path, clock, sink, grace=0)
        restarted.tick()
        assert len(sink.alerts) == 1
        server.answer(lambda _r: Reply(200, health(clock.now)))
        restarted.tick()
    assert events(sink) == [
        ("trigger", "scheduler_dead", "critical"),
        ("resolve", "scheduler_dead", "critical"),
    ]


def test_unreachable_api_server_alerts(tmp_path: Path) -> None:
    """Connection refused is an api_unreachable page (after the grace), not a silent pass."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    clock, sink = Clock(), RecordingSink("capture")
    dog = make(f"http://127.0.0.1:{port}", tmp_path, clock, sink, grace=0)
    dog.tick()
    assert events(sink) == [("trigger", "api_unreachable", "critical")]
    assert "cannot reach" in sink.alerts[0].details["error"]


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (Reply(200, "<html>login</html>"), "not JSON"),
        (Reply(200, {"scheduler": {"status": "healthy"}}), "not Airflow's health JSON"),
        (
            Reply(200, {"metadatabase": {"status": "healthy"}, "scheduler": {"status": "fine"}}),
            "'scheduler.status'",
        ),
        (Reply(404, {"error": "Moved in Airflow 3"}), "/api/v2/monitor/health"),
        (Reply(500, "oops"), "HTTP 500"),
    ],
)
def test_malformed_or_wrong_url_alerts_with_a_clear_error(tmp_path: Path, reply: Reply, needle: str) -> None:
    """Garbage, a wrong shape, a 404 or a 500 each raise an alert whose error says what is wrong."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: reply) as server:
        make(server.url, tmp_path, clock, sink, grace=0).tick()
    assert events(sink) == [("trigger", "api_unreachable", "critical")]
    assert needle in sink.alerts[0].details["error"]


def test_unknown_while_blind_is_neither_opened_nor_resolved(tmp_path: Path) -> None:
    """While the api-server is down, an open scheduler incident stays open (no false resolve)."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: Reply(200, health(T0 - timedelta(seconds=60), "unhealthy"))) as server:
        dog = make(server.url, tmp_path, clock, sink, grace=0)
        dog.tick()
        server.answer(lambda _r: Reply(503, "down"))
        clock.advance(10)
        dog.tick()
    assert sorted(dog.incidents) == ["api_unreachable", "scheduler_dead"]
    assert [e[0] for e in events(sink)] == ["trigger", "trigger"]


def _jobs_api(beats: dict[int, datetime], clock: Clock) -> Any:
    def answer(request: Recorded) -> Reply:
        if request.path.startswith("/api/v2/monitor/health"):
            return Reply(200, health(max(beats.values())))
        assert request.headers.get("Authorization") == "Bearer tok"
        if request.path.startswith("/api/v2/jobs"):
            jobs = [
                {
                    "id": i,
                    "job_type": "SchedulerJob",
                    "state": "running",
                    "latest_heartbeat": b.isoformat(),
                    "hostname": f"host{i}",
                }
                for i, b in beats.items()
            ]
            return Reply(200, {"jobs": jobs, "total_entries": len(jobs)})
        return Reply(200, {"task_instances": [{"dag_id": "d", "task_id": "t", "state": "running"}]})

    return answer


def test_ha_one_dead_replica_is_a_warning_not_a_page(tmp_path: Path) -> None:
    """Two schedulers, one SIGKILLed (row still running, stale beat): a warning; all dead: a page."""
    clock, sink = Clock(), RecordingSink("capture")
    beats = {1: T0 - timedelta(seconds=2), 2: T0 - timedelta(seconds=90)}
    with serve(_jobs_api(beats, clock)) as server:
        dog = make(server.url, tmp_path, clock, sink, grace=0, source={"token": "tok"})
        dog.tick()
        assert events(sink) == [("trigger", "scheduler_replica_dead:2", "warning")]
        beats[1] = T0 - timedelta(seconds=60)
        dog.tick()
    assert ("trigger", "scheduler_dead", "critical") in events(sink)
    dead = next(a for a in sink.alerts if "scheduler_dead" in a.dedup_key)
    assert dead.details["running_tasks"] == ["d.t[None] run=None try=None running on None"]
    assert ("resolve", "scheduler_replica_dead:2", "warning") in events(sink)


def test_dead_triggerer_alerts_only_when_expected(tmp_path: Path) -> None:
    """An unhealthy triggerer pages in auto mode; a never-started one (status null) does not."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(
        lambda _r: Reply(
            200, {**health(T0), "triggerer": {"status": "unhealthy", "latest_triggerer_heartbeat": None}}
        )
    ) as server:
        make(server.url, tmp_path, clock, sink, grace=0).tick()
        assert events(sink) == [("trigger", "triggerer_dead", "critical")]
        server.answer(lambda _r: Reply(200, health(T0)))
        other = RecordingSink("capture")
        make(server.url, tmp_path / "b", clock, other, grace=0).tick()
    assert other.alerts == []


def test_canary_without_credentials_warns(tmp_path: Path) -> None:
    """A canary that cannot be checked is a warning, never a silent pass."""
    clock, sink = Clock(), RecordingSink("capture")
    with serve(lambda _r: Reply(200, health(T0))) as server:
        make(server.url, tmp_path, clock, sink, grace=0, canary_dag_id="canary", canary_max_age=600).tick()
    assert events(sink) == [("trigger", "canary_unchecked", "warning")]
