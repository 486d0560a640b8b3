"""Attempt records in the real store: convergence, outage spooling, reconcile, duplicates, alerts."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow_crashsafe.alerting import Dispatcher, MemoryOutbox
from airflow_crashsafe.audit.alerts import alert_risky
from airflow_crashsafe.audit.cli import find_duplicates
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.audit.reconcile import reconcile
from airflow_crashsafe.audit.spool import Spool, deliver
from airflow_crashsafe.audit.writer import Writer
from airflow_crashsafe.store.attempts import AttemptLog, record, slot_rows
from airflow_crashsafe.store.store import Store

NOW = datetime.now(timezone.utc).replace(microsecond=0)
KEY = {"dag_id": "nightly", "task_id": "load", "map_index": -1, "run_id": "scheduled__x"}


def start(try_number: int, pid: int, at: datetime) -> AttemptEvent:
    return AttemptEvent(
        source="listener",
        **KEY,
        try_number=try_number,
        hostname="w1",
        pid=pid,
        slot_partition="2026-01-01",
        ti_id=f"ti{try_number}",
        started_at=at,
        last_seen_at=at,
    )


def rows(store: Store) -> list[dict[str, Any]]:
    with store.transaction() as db:
        return slot_rows(db, since=NOW - timedelta(days=1))


def apply(store: Store, event: AttemptEvent) -> None:
    with store.transaction() as db:
        record(db, event)


def test_out_of_order_events_converge_on_one_row(store: Store) -> None:
    """End before start, a placeholder from history, and repeats end as one row per execution."""
    end = AttemptEvent(
        source="listener", **KEY, try_number=1, hostname="w1", pid=5, ended_at=NOW, reported_state="success"
    )
    history = AttemptEvent(
        source="reconcile",
        **KEY,
        try_number=1,
        started_at=NOW - timedelta(seconds=9),
        ended_at=NOW,
        state="success",
    )
    for event in (end, history, start(1, 5, NOW - timedelta(seconds=10)), end, history):
        apply(store, event)
    [row] = rows(store)
    assert (row["hostname"], row["pid"], row["start_source"], row["end_source"]) == (
        "w1",
        5,
        "listener",
        "listener",
    )
    assert row["started_at"] == NOW - timedelta(seconds=10)
    assert row["slot_partition"] == "2026-01-01"


class Flaky(AttemptLog):
    """The real store side, whose writes fail while ``down`` is set (the store is unreachable)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.down, self.delay = False, 0.0

    def apply(self, event: AttemptEvent) -> None:
        if self.delay:
            time.sleep(self.delay)
        if self.down:
            raise ConnectionError("store down")
        super().apply(event)

    def discard_connection(self) -> None:
        """Keep it: the outage is simulated, the connection itself never broke."""


def test_store_outage_spools_without_slowing_tasks_and_loses_nothing(store: Store, tmp_path: Path) -> None:
    """With the store down or hanging, each event costs at most the time limit; all arrive afterwards."""
    flaky = Flaky(store)
    writer = Writer(flaky, Spool(tmp_path / "spool"), timeout=0.2, beacon_interval=3600)
    flaky.down = True
    began = time.monotonic()
    for pid in range(100, 120):
        writer.submit(start(1, pid, NOW))
    flaky.down, flaky.delay = False, 5.0  # now hanging: later events go straight to the spool
    for pid in range(120, 130):
        writer.submit(start(1, pid, NOW))
    elapsed = time.monotonic() - began
    assert elapsed < 20 * 0.05 + 0.2 + 10 * 0.05, elapsed
    assert writer.spool.count() == 30
    flaky.delay = 0.0
    time.sleep(5.5)
    assert writer.submit(start(1, 999, NOW))
    deadline = time.monotonic() + 10
    while writer.spool.count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writer.spool.count() == 0
    assert len(rows(store)) == 31


class FakeApi:
    """The tries endpoint of an api-server that reset try 1 at +40 s."""

    def tries(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> list[dict[str, Any]]:
        return [
            {
                "try_number": 1,
                "state": "failed",
                "hostname": "w1",
                "pid": 1,
                "start_date": (NOW - timedelta(seconds=300)).isoformat(),
                "end_date": (NOW - timedelta(seconds=260)).isoformat(),
            },
            {
                "try_number": 2,
                "state": "running",
                "hostname": "w1",
                "pid": 2,
                "start_date": (NOW - timedelta(seconds=260)).isoformat(),
                "end_date": None,
            },
        ]


def test_reconcile_fills_a_reset_attempt_and_duplicates_alert_once(store: Store) -> None:
    """A reset try gets its end from history; the slot is a critical duplicate, alerted once."""
    apply(store, start(1, 1, NOW - timedelta(seconds=300)))
    apply(
        store,
        AttemptEvent(
            source="listener",
            **KEY,
            try_number=1,
            hostname="w1",
            pid=1,
            last_seen_at=NOW - timedelta(seconds=253),
        ),
    )
    apply(store, start(2, 2, NOW - timedelta(seconds=260)))
    report = reconcile(store, FakeApi(), grace=timedelta(seconds=60))  # type: ignore[arg-type]
    assert (report.ends_filled, report.still_running) == (1, 1)
    [dup] = find_duplicates(store, since=timedelta(hours=1))
    assert dup.kinds == ("overlap", "reset_rerun")
    assert dup.overlap_seconds == 7.0
    assert (dup.protection, dup.risk) == ("unprotected", "critical")
    dispatcher = Dispatcher([], outbox=MemoryOutbox())
    assert len(alert_risky(store, dispatcher, [dup])) == 1
    assert alert_risky(store, dispatcher, [dup]) == []


def test_dying_beacons_move_a_reconciled_end_to_the_real_death(store: Store) -> None:
    """SIGTERM moment stored; one-UPDATE beacons raise last_seen and a history end, never a listener end."""
    from airflow_crashsafe.audit.events import seen
    from airflow_crashsafe.store.attempts import touch

    first, second = start(1, 1, NOW - timedelta(seconds=300)), start(2, 2, NOW - timedelta(seconds=259))
    for event in (first, second):
        apply(store, event)
    apply(store, seen(first, now=NOW - timedelta(seconds=257), terminated=True))
    apply(store, _history_end(NOW - timedelta(seconds=260)))
    apply(
        store,
        AttemptEvent(
            source="listener",
            **KEY,
            try_number=2,
            hostname="w1",
            pid=2,
            ended_at=NOW,
            reported_state="success",
        ),
    )
    with store.transaction() as db:
        touched = touch(
            db,
            [
                seen(first, now=NOW - timedelta(seconds=252.5)),
                seen(second, now=NOW + timedelta(seconds=1)),
                seen(start(3, 3, NOW), now=NOW),  # not stored yet: nothing to touch
            ],
        )
    assert touched == 2
    by_try = {r["try_number"]: r for r in rows(store)}
    assert by_try[1]["terminated_at"] == NOW - timedelta(seconds=257)
    assert by_try[1]["ended_at"] == by_try[1]["last_seen_at"] == NOW - timedelta(seconds=252.5)
    assert by_try[1]["end_source"] == "reconcile"
    assert by_try[2]["ended_at"] == NOW  # the process's own end stays
    [dup] = find_duplicates(store, since=timedelta(hours=1))
    assert dup.kinds == ("overlap", "reset_rerun")
    assert dup.overlap_seconds == 6.5


def _history_end(at: datetime) -> AttemptEvent:
    """Reconcile's event for try 1: Airflow archived it as failed at ``at`` (the reset)."""
    return AttemptEvent(
        source="reconcile", **KEY, try_number=1, hostname="w1", pid=1, ended_at=at, state="failed"
    )


def test_deliver_applies_what_exited_task_processes_left_in_the_spool(store: Store, tmp_path: Path) -> None:
    """``audit reconcile`` and the drill deliver the spool first: nothing waits for a next task."""
    spool = Spool(tmp_path / "spool")
    spool.append([start(1, 101, NOW), start(2, 202, NOW + timedelta(seconds=5))])
    assert deliver(store, tmp_path / "spool") == 2
    assert sorted(r["pid"] for r in rows(store)) == [101, 202]
    assert spool.count() == 0
    assert deliver(store, tmp_path / "nothing-here") == 0


def test_a_poison_spool_line_is_quarantined_and_the_rest_reach_the_store(
    store: Store, tmp_path: Path
) -> None:
    """A wrong-typed spool line no longer blocks its file: the writer delivers the others, once."""
    spool = Spool(tmp_path / "spool")
    good = [start(1, 101, NOW), start(2, 202, NOW + timedelta(seconds=5))]
    poison = {**start(9, 909, NOW).to_json(), "pid": "12ab"}
    spool.directory.mkdir(parents=True)
    spool.path.write_text(
        "\n".join([json.dumps(good[0].to_json()), json.dumps(poison), json.dumps(good[1].to_json())]) + "\n"
    )
    writer = Writer(AttemptLog(store), spool, timeout=5.0)
    assert writer.submit(start(3, 303, NOW + timedelta(seconds=9)))
    assert writer.close(10.0)
    assert sorted(r["pid"] for r in rows(store)) == [101, 202, 303]
    assert spool.count() == 0
    assert '"12ab"' in next((tmp_path / "spool").glob("*.poison")).read_text()
