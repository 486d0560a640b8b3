"""The ledger and fence lists filter, count and limit in the store's SQL, not in Python."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.audit import digest
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import Store, attempts, ledger
from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import Reader
from benchmarks.crash_records import seed_crash
from tests.unit.ui.conftest import UiHarness

ATTEMPT = Attempt(run_id="r", try_number=1, ti_id="ti-1", hostname="w1", pid=7, clear_number=0)


def _key(store: Store, dag_id: str, n: int, state: str, at: datetime) -> None:
    slot = Slot(dag_id=dag_id, task_id="pay", map_index=-1, partition=f"p{n}")
    key = f"{dag_id}-{state}-{n}"
    with store.transaction() as db:
        ledger.claim(
            db,
            before=None,
            key=key,
            slot=slot,
            target="payments",
            version=0,
            fingerprint="f",
            request={},
            attempt=ATTEMPT,
            token=1,
        )
        ledger.record_outcome(db, key, state=state, response_status=200, result=None, error=None)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        db.execute(
            "UPDATE crashsafe_ledger SET intent_at = %(at)s WHERE idem_key = %(k)s", {"at": stamp, "k": key}
        )


def test_five_unknown_keys_behind_600_newer_successes_are_listed_and_counted(ui: UiHarness) -> None:
    """state=unknown finds all five old unknown keys; total counts the filter, not a truncated list."""
    now = datetime.now(timezone.utc)
    for n in range(5):
        _key(ui.store, "payments", n, "unknown", now - timedelta(days=2, minutes=n))
    for n in range(600):
        _key(ui.store, "payments", n, "succeeded", now - timedelta(seconds=n))
    _key(ui.store, "hidden", 0, "unknown", now)
    ui.allowed = {"payments"}
    found = ui.get("/api/ledger", state="unknown", limit=500).json()
    assert found["total"] == 5
    assert sorted(e["idem_key"] for e in found["items"]) == [f"payments-unknown-{n}" for n in range(5)]
    everything = ui.get("/api/ledger", limit=100).json()
    assert everything["total"] == 605
    assert len(everything["items"]) == 100
    assert everything["items"][0]["idem_key"] == "payments-succeeded-0"  # newest intent first
    assert "payments-unknown-4" in ui.get("/ledger", state="unknown").text


def test_fence_events_are_counted_and_limited_in_sql(ui: UiHarness) -> None:
    """The SQL path returns the right total per kind and the newest items of readable DAGs only."""
    for dag_id, count in (("mine", 30), ("theirs", 7)):
        slot = Slot(dag_id=dag_id, task_id="load", map_index=-1, partition="p")
        for n in range(count):
            kind = "fenced_out" if n % 3 else "skipped_committed"
            ui.store.record_event(kind, slot, f"t{n}", ATTEMPT, token=n)
        ui.store.record_event("committed", slot, "t", ATTEMPT, token=99)
    reader = Reader(ui.store, frozenset({"mine", "nobody"}))
    total, items = queries.fence_events(reader, limit=5)
    assert total == 30
    assert [e.target for e in items] == ["t29", "t28", "t27", "t26", "t25"]
    assert queries.fence_counts(reader) == {"fenced_out": 20, "skipped_committed": 10}
    total, items = queries.fence_events(reader, kind="skipped_committed", limit=100)
    assert total == 10
    assert all(e.kind == "skipped_committed" for e in items)
    assert queries.fence_events(Reader(ui.store, frozenset()), limit=5) == (0, [])
    ui.allowed = {"mine"}
    overview = ui.get("/api/overview").json()
    assert (overview["fence_rejections"], overview["skipped_committed"]) == (20, 10)


def test_pending_classification_counts_only_readable_dags(
    ui: UiHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Task instances waiting for the digest are counted over the DAGs the user may read, not all."""
    seed_crash(ui.store, ["mine"], tasks=2)
    seed_crash(ui.store, ["theirs_a", "theirs_b"], tasks=3)
    monkeypatch.setattr(queries, "refresh_digest", lambda store: 1)  # the budget ran out: nothing classified
    mine = queries.pending_classification(Reader(ui.store, frozenset({"mine"})))
    everyone = queries.pending_classification(Reader(ui.store, frozenset({"mine", "theirs_a", "theirs_b"})))
    assert 0 < mine < everyone
    assert queries.pending_classification(Reader(ui.store, frozenset())) == 0


def test_a_timeline_reads_only_the_runs_of_its_slot(ui: UiHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task with 60 runs: its timeline, by run or by partition, reads that slot's two attempt rows."""
    crash = seed_crash(ui.store, ["nightly"], tasks=1, partitions=60)
    digest.refresh(ui.store)  # classified beforehand: the request's own catch-up reads nothing
    read: list[object] = []
    real = attempts._from_db
    monkeypatch.setattr(attempts, "_from_db", lambda values: read.append(values) or real(values))
    ui.allowed = {"nightly"}
    part = crash.partitions[17]
    for query in ({"run_id": f"scheduled__{part}"}, {"partition": part}):
        read.clear()
        body = ui.get("/api/timeline", dag_id="nightly", task_id="load_0", **query).json()
        assert (body["partition"], len(body["executions"])) == (part, 2)
        assert len(read) == 2, query  # not the task's 120 rows across all its runs
