"""The writer's liveness beacons and the SIGTERM moment of a stale attempt (no database)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.audit.spool import Spool
from airflow_crashsafe.audit.writer import Writer
from airflow_crashsafe.testing.metrics import record_metrics
from tests.unit.audit.sinks import MemorySink as Sink

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


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def writer(sink: Sink, tmp_path: Path, *, beacon_interval: float, dying_interval: float = 0.5) -> Writer:
    return Writer(
        sink,
        Spool(tmp_path / "spool"),
        timeout=1.0,
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


def test_a_failed_write_discards_the_connection_and_the_next_one_drains_the_spool(tmp_path: Path) -> None:
    """A write the sink refuses is spooled and its connection dropped; the next stored write delivers it."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=3600)
    sink.down = True
    assert not w.submit(START)
    assert (sink.discarded, w.spool.count()) == (1, 1)
    sink.down = False
    later = replace(START, pid=12)
    assert w.submit(later)
    wait_for(lambda: w.spool.count() == 0)
    assert sink.applied == [later, START]


def test_spooled_events_and_the_spool_depth_reach_airflow_metrics(tmp_path: Path) -> None:
    """Spooling counts the events and gauges the depth; the drain after the store returns gauges 0."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=3600)
    with record_metrics() as sent:
        sink.down = True
        assert not w.submit(START)
        assert not w.submit(replace(START, pid=12))
        sink.down = False
        assert w.submit(replace(START, pid=13))
        wait_for(lambda: w.spool.count() == 0)
        wait_for(lambda: [s.value for s in sent.named("crashsafe.audit.spool_depth")][-1:] == [0])
    assert sent.count("crashsafe.audit.spooled") == 2
    assert [s.value for s in sent.named("crashsafe.audit.spool_depth")] == [1, 2, 0]


STOP = replace(START, started_at=None, ended_at=START.started_at, reported_state="deferred")


def leftovers(w: Writer) -> list[str]:
    return sorted(p.name for p in w.spool.directory.glob("events-*"))


def test_the_last_event_waits_for_a_write_in_flight_instead_of_the_spool(tmp_path: Path) -> None:
    """A slow start write still under way: the stop, given stop_timeout, waits for it and is stored."""
    sink = Sink()
    sink.delay = 0.3
    w = Writer(sink, Spool(tmp_path / "spool"), timeout=0.05, beacon_interval=3600, tick=0.01)
    assert not w.submit(START)  # outlasted 0.05 s: spooled, and the write goes on
    assert w.submit(STOP, timeout=2.0)
    assert STOP in sink.applied


def test_close_lets_the_write_in_flight_and_its_drain_finish(tmp_path: Path) -> None:
    """os._exit follows before_stopping: close() returns only once the write and the drain are done."""
    sink = Sink()
    sink.delay = 0.2
    w = Writer(sink, Spool(tmp_path / "spool"), timeout=0.05, beacon_interval=3600, tick=0.01)
    assert not w.submit(STOP)  # spooled at the limit; the thread still writes it, then drains the copy
    assert w.close(timeout=5.0)
    assert sink.applied == [STOP, STOP]
    assert leftovers(w) == []


def test_close_at_its_limit_puts_the_undrained_rest_back(tmp_path: Path) -> None:
    """A drain still running at close's limit stops between events; nothing stays claimed."""
    sink = Sink()
    sink.delay = 0.05
    other = Spool(tmp_path / "spool")  # another process's spooled events
    other.append([replace(START, pid=100 + i) for i in range(40)])
    w = Writer(sink, Spool(tmp_path / "spool"), timeout=1.0, beacon_interval=3600, tick=0.01)
    assert w.submit(START)  # stored, then the thread drains the other process's file
    wait_for(lambda: len(sink.applied) > 2)
    assert w.close(timeout=0.2)
    names = leftovers(w)
    assert names
    assert all(n.endswith(".jsonl") for n in names)
    assert len(sink.applied) - 1 + w.spool.count() == 40


def test_no_beacon_starts_after_close(tmp_path: Path) -> None:
    """A closed writer's thread starts no new store work the exit would cut short."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=0.02)
    assert w.submit(START)
    assert w.close(timeout=1.0)
    count = len(sink.beacons)
    time.sleep(0.1)
    assert len(sink.beacons) == count


def test_after_close_the_thread_ends_and_releases_its_connection(tmp_path: Path) -> None:
    """Once close()'s limit has passed, the writer's thread stops polling and releases the sink."""
    sink = Sink()
    w = writer(sink, tmp_path, beacon_interval=3600)
    assert w.submit(START)
    assert w.close(timeout=0.05)
    wait_for(lambda: sink.released == 1)
    assert not w.submit(replace(START, pid=START.pid + 1))  # no thread left: spooled, not lost
    assert w.spool.count() == 1
