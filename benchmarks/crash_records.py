"""Crash-shaped crashsafe records for the UI's benchmark and tests, written through the real code.

One scheduler crash as Airflow 3.3 plays it (docs/design.md, "How Airflow behaves on a crash"):
every task starts (try 1, listener start and liveness beacons), the scheduler is SIGKILLed, comes
back after an outage longer than the health-check threshold and resets them; try 2 starts at once
while try 1's worker is still alive (its beacons go on until its next heartbeat gets it killed), so
the two overlap; try 2 succeeds. Try 1 ends with no hook at all. Events go through
:func:`airflow_crashsafe.store.attempts.record`, exactly as the listener writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import Store, attempts, ledger

__all__ = ["Crash", "seed_crash", "seed_protection_records"]

PLAIN_OPERATOR = "airflow.providers.common.sql.operators.sql.SQLExecuteQueryOperator"


@dataclass(frozen=True)
class Crash:
    """When the scheduler died and came back, and the scheduler jobs' spans around it."""

    killed_at: datetime
    restarted_at: datetime
    first_scheduler_started: datetime
    partitions: tuple[str, ...]


def _start(key: dict[str, Any], try_number: int, pid: int, ti_id: str, at: datetime) -> AttemptEvent:
    """The listener's start event of one try on worker-1."""
    return AttemptEvent(
        source="listener",
        **key,
        try_number=try_number,
        hostname="worker-1",
        pid=pid,
        ti_id=ti_id,
        clear_number=0,
        started_at=at,
        last_seen_at=at,
        operator=PLAIN_OPERATOR,
    )


def _events(
    dag: str, task: str, run_id: str, part: str, t0: datetime, crash: Crash, n: int
) -> list[AttemptEvent]:
    key = {"dag_id": dag, "task_id": task, "map_index": -1, "run_id": run_id, "slot_partition": part}
    pid1, pid2 = 40_000 + 2 * n, 40_001 + 2 * n
    events = [_start(key, 1, pid1, f"0191-{n:06d}-a", t0)]
    # try 1's beacons: every 5 s until its worker is killed 9 s after the reset (stale heartbeat + 5 s).
    beat = t0
    while beat < crash.restarted_at + timedelta(seconds=9):
        beat += timedelta(seconds=5)
        events.append(
            AttemptEvent(
                source="listener", **key, try_number=1, hostname="worker-1", pid=pid1, last_seen_at=beat
            )
        )
    start2 = crash.restarted_at + timedelta(seconds=2)
    end2 = start2 + timedelta(seconds=60 + n % 7)
    events += [
        _start(key, 2, pid2, f"0191-{n:06d}-b", start2),
        AttemptEvent(
            source="listener",
            **key,
            try_number=2,
            hostname="worker-1",
            pid=pid2,
            ended_at=end2,
            reported_state="success",
            last_seen_at=end2,
        ),
        AttemptEvent(source="scheduler", **key, try_number=2, state="success", ended_at=end2),
    ]
    return events


def seed_crash(
    store: Store,
    dag_ids: list[str],
    *,
    tasks: int = 2,
    partitions: int = 1,
    now: datetime | None = None,
    task_name: str = "load_{i}",
    run_id: str = "scheduled__{partition}",
) -> Crash:
    """Record one crash hitting ``tasks`` tasks of each DAG for ``partitions`` dates: 2 attempts each.

    ``run_id`` is formatted with the partition (a manual run needs ``manual__{partition}``).
    """
    now = now or datetime.now(timezone.utc).replace(microsecond=0)
    t0 = now - timedelta(minutes=30)
    crash = Crash(
        killed_at=t0 + timedelta(seconds=10),
        restarted_at=t0 + timedelta(seconds=55),
        first_scheduler_started=t0 - timedelta(minutes=10),
        partitions=tuple(
            (now.date() - timedelta(days=p + 1)).isoformat() + "T00:00:00+00:00" for p in range(partitions)
        ),
    )
    n = 0
    with store.transaction() as db:
        for dag in dag_ids:
            for part in crash.partitions:
                for i in range(tasks):
                    run = run_id.format(partition=part)
                    for event in _events(
                        dag, task_name.format(i=i), run, part, t0 + timedelta(seconds=i % 5), crash, n
                    ):
                        attempts.record(db, event)
                    n += 1
    return crash


def seed_protection_records(store: Store, dag_id: str, *, task_id: str, marker: str) -> None:
    """A fence rejection, a skipped committed write and a ledger key whose vendor reply holds ``marker``."""
    slot = Slot(dag_id=dag_id, task_id=task_id, map_index=-1, partition="2026-01-01T00:00:00+00:00")
    stale = Attempt(
        run_id="scheduled__x", try_number=1, ti_id="ti-1", hostname="worker-1", pid=11, clear_number=0
    )
    store.record_event(
        "fenced_out",
        slot,
        f"warehouse.{marker}",
        stale,
        token=1,
        detail={"stage": "commit", "newest_token": 2, "newest_try": 2},
    )
    store.record_event(
        "skipped_committed",
        slot,
        "warehouse.facts",
        stale,
        detail={"committed_try": 2, "committed_ti_id": "ti-2"},
    )
    with store.transaction() as db:
        ledger.claim(
            db,
            before=None,
            key=f"key-{dag_id}",
            slot=slot,
            target="payments",
            version=0,
            fingerprint="f",
            request={"body": "request-body-xyz", "headers": {"Authorization": "Bearer s3cr3t-request"}},
            attempt=stale,
            token=1,
        )
        ledger.record_outcome(
            db,
            f"key-{dag_id}",
            state="succeeded",
            response_status=201,
            result={"html": marker, "access_token": "s3cr3t-vendor"},
            error=None,
        )
