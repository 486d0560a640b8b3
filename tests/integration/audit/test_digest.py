"""The duplicate digest in the real store: same verdicts as a full classification, kept current cheaply."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_crashsafe.audit import digest
from airflow_crashsafe.audit.cli import find_duplicates
from airflow_crashsafe.audit.events import AttemptEvent, seen
from airflow_crashsafe.store import attempts, dirty
from airflow_crashsafe.store.duplicates import DuplicateFilter
from airflow_crashsafe.store.store import Store
from benchmarks.crash_records import seed_crash, seed_protection_records

DAGS = ["nightly", "payments"]
EVER = datetime(2000, 1, 1, tzinfo=timezone.utc)


def ever(*dags: str, risk: str | None = None) -> DuplicateFilter:
    """Every slot of these DAGs, whenever it was active."""
    return DuplicateFilter(dags, since=EVER, risk=risk)


def verdicts(reports: list[Any]) -> dict[tuple[str, str, int, str], tuple[Any, ...]]:
    return {
        r.slot_key: (r.kinds, r.overlap_seconds, r.protection, r.risk, len(r.executions), len(r.reruns))
        for r in reports
    }


def test_digest_agrees_with_a_full_classification(store: Store) -> None:
    """After a refresh, every duplicated slot reads back with find_duplicates' own verdict."""
    seed_crash(store, DAGS, tasks=3, partitions=2)
    seed_protection_records(store, "payments", task_id="load_1", marker="m")
    done = digest.refresh(store)
    assert (done.task_instances, done.pending) == (12, 0)
    total, reports = digest.duplicates(store, ever(*DAGS), limit=1000)
    assert total == 12
    expected = verdicts(find_duplicates(store, since=timedelta(days=1)))
    assert verdicts(reports) == expected
    assert {v[2] for v in expected.values()} == {"fenced", "unprotected"}
    assert digest.risk_counts(store, ever(*DAGS)) == {"critical": 10, "none": 2}
    assert digest.duplicates(store, ever("payments", risk="none"))[0] == 2
    assert digest.duplicates(store, ever()) == (0, [])
    one = next(iter(expected))
    report = digest.slot_report(store, one)
    assert report is not None
    assert verdicts([report]) == {one: expected[one]}


def test_a_later_beacon_reclassifies_only_its_task_instance(store: Store) -> None:
    """A dying beacon of one reset attempt lengthens that slot's overlap; nothing else is redone."""
    seed_crash(store, ["nightly"], tasks=2)
    digest.refresh(store)
    _, before = digest.duplicates(store, ever("nightly"))
    slot = next(r for r in before if r.task_id == "load_0")
    first = slot.executions[0]
    beacon = AttemptEvent(
        source="listener",
        dag_id="nightly",
        task_id="load_0",
        map_index=-1,
        run_id=first.run_id,
        try_number=first.try_number,
        hostname=first.hostname,
        pid=first.pid,
    )
    with store.transaction() as db:
        attempts.record(db, seen(beacon, now=first.alive_until + timedelta(seconds=3), terminated=True))
    assert digest.refresh(store).task_instances == 1
    after = digest.slot_report(store, slot.slot_key)
    assert after is not None
    assert after.overlap_seconds == pytest.approx(slot.overlap_seconds + 3)
    assert after.executions[0].terminated_at is not None


def test_refresh_stops_at_its_budget_and_catches_up_later(store: Store) -> None:
    """A bounded refresh leaves the rest pending; the next ones finish it."""
    seed_crash(store, ["nightly"], tasks=10)
    partial = digest.refresh(store, budget_seconds=0, chunk=3)
    assert (partial.task_instances, partial.pending) == (3, 7)
    assert digest.duplicates(store, ever("nightly"))[0] == 3
    assert digest.refresh(store, chunk=3) == digest.Refreshed(task_instances=7, pending=0)
    assert digest.duplicates(store, ever("nightly"))[0] == 10


def test_a_change_racing_the_refresh_stays_marked(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write landing between the refresh's read and its delete keeps its mark for the next refresh."""
    seed_crash(store, ["nightly"], tasks=1)
    real = attempts.rows_of_runs
    raced: list[bool] = []

    def read_then_race(db: Any, **task: Any) -> list[dict[str, Any]]:
        rows = real(db, **task)
        dirty.mark(db, rows[0])  # what a worker's write does after the refresh read the marks
        raced.append(True)
        return rows

    monkeypatch.setattr(attempts, "rows_of_runs", read_then_race)
    assert digest.refresh(store).task_instances == 1
    monkeypatch.setattr(attempts, "rows_of_runs", real)
    assert raced == [True]
    assert digest.refresh(store).task_instances == 1
    assert digest.refresh(store).task_instances == 0
