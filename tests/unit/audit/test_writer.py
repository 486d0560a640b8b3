"""The writer's liveness beacons and the SIGTERM moment of a stale attempt (no database)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.audit.spool import Spool
from airflow_crashsafe.audit.writer import Writer

START = AttemptEvent(
    source="listener",
    dag_id="nightly",
    task_id="load",
    map_index=-1,
    run_id="r",
    try_number=1,
    hostname="w1",
    pid=11,
    started_at=datetime.now(timezone.utc),
)


class Sink:
    """Stands in for the store: keeps applied events and beacon batches, can be made to fail."""

    def __init__(self) -> None:
        self.applied: list[AttemptEvent] = []
        self.beacons: list[AttemptEvent] = []
        self.down = False
        self.lock = threading.Lock()

    def apply(self, event: AttemptEvent) -> None:
        if self.down:
            raise ConnectionError("store down")
        with self.lock:
            self.applied.append(event)

    def touch(self, events: list[AttemptEvent]) -> None:
        if self.down:
            raise ConnectionError("store down")
        with self.lock:
            self.beacons += events


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def writer(sink: Sink, tmp_path: Path, *, beacon_interval: float, dying_interval: float = 0.5) -> Writer:
    return Writer(
        sink.apply,
        Spool(tmp_path / "spool"),
        timeout=1.0,
        touch=sink.touch,
        tick=0.01,
        beacon_interval=beacon_interval,
        dying_interval=dying_interval,
    )


def test_beacons_refresh_running_attempts_until_their_end(tmp_path: Path) -> None:
    """Every beacon_interval a running attempt gets a cheap touch; after its end, none."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=0.05)
    assert w.submit(START)
    wait_for(lambda: len(sink.beacons) >= 3)
    assert all(b.last_seen_at and b.terminated_at is None and b.pid == 11 for b in sink.beacons)
    assert w.submit(replace(START, started_at=None, ended_at=START.started_at))
    time.sleep(0.1)
    count = len(sink.beacons)
    time.sleep(0.2)
    assert len(sink.beacons) == count


def test_sigterm_is_stored_then_beacons_come_fast_until_the_kill(tmp_path: Path) -> None:
    """note_terminated (from a signal handler) stores the moment, then beacons every dying_interval."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=3600, dying_interval=0.05)
    assert w.submit(START)
    assert sink.beacons == []
    before = datetime.now(timezone.utc)
    w.note_terminated()
    w.note_terminated()  # a second SIGTERM keeps the first moment
    wait_for(lambda: len(sink.beacons) >= 4)
    [marked] = [e for e in sink.applied if e.terminated_at is not None]
    assert marked.terminated_at is not None
    assert before <= marked.terminated_at == marked.last_seen_at
    last = sink.beacons[-1].last_seen_at
    assert last is not None
    assert last > marked.terminated_at


def test_sigterm_moment_is_spooled_when_the_store_is_down(tmp_path: Path) -> None:
    """The SIGTERM moment is evidence: with the store down it goes to the spool, not away."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=3600, dying_interval=3600)
    assert w.submit(START)
    sink.down = True
    w.note_terminated()
    wait_for(lambda: w.spool.count() == 1)
    [line] = w.spool.path.read_text().splitlines()
    assert '"terminated_at": "' in line
