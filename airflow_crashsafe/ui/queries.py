"""What the pages and the JSON API show, read from the crashsafe store and filtered per user.

Duplicates come from the audit's digest (:mod:`airflow_crashsafe.audit.digest`): the audit's own
classification, kept in the store and brought up to date incrementally before each read, for at
most ``REFRESH_BUDGET_SECONDS`` (the rest is reported as pending and caught up by later requests
or ``airflow-crashsafe audit reconcile``). Reads are bounded, indexed queries; the DAGs a
:class:`~airflow_crashsafe.ui.access.Reader` may read are always applied inside them, before
anything is returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from airflow_crashsafe.audit import digest
from airflow_crashsafe.audit.classify import RISKS, Execution, SlotReport, executions_of
from airflow_crashsafe.store import Store, dirty, events, ledger, scans
from airflow_crashsafe.store.attempts import partition_rows, slot_partition_of
from airflow_crashsafe.store.duplicates import DuplicateFilter
from airflow_crashsafe.ui.access import Reader
from airflow_crashsafe.ui.models import (
    DuplicateSlot,
    ExecutionOut,
    FenceEvent,
    LedgerEntryOut,
    Outage,
    RerunOut,
    RiskTask,
    Timeline,
)
from airflow_crashsafe.ui.redact import redact

__all__ = [
    "REFRESH_BUDGET_SECONDS",
    "duplicate_slots",
    "fence_counts",
    "fence_events",
    "ledger_entries",
    "pending_classification",
    "refresh_digest",
    "risk_counts",
    "risk_map",
    "timeline",
    "with_outages",
]

FENCE_KINDS = ("fenced_out", "skipped_committed")
#: The most one request spends catching the digest up (a crash just wrote thousands of attempts),
#: in chunks of 100 task instances (~0.05 s on SQLite, ~0.2 s on PostgreSQL).
REFRESH_BUDGET_SECONDS = 0.3


def refresh_digest(store: Store) -> int:
    """Catch the digest up (within the budget); how many changed task instances still wait, all DAGs."""
    return digest.refresh(store, budget_seconds=REFRESH_BUDGET_SECONDS, chunk=100).pending


def pending_classification(reader: Reader) -> int:
    """Catch the digest up (within the budget); how many changed task instances of readable DAGs wait."""
    if not refresh_digest(reader.store):
        return 0
    with reader.store.transaction(immediate=False) as db:
        return dirty.pending(db, dag_ids=reader.dags())


def _execution(e: Execution) -> ExecutionOut:
    return ExecutionOut.model_validate(e, from_attributes=True)


def _slot(r: SlotReport) -> DuplicateSlot:
    return DuplicateSlot.model_validate(r, from_attributes=True)


def _duplicates(reader: Reader, since: timedelta, risk: str | None = None) -> DuplicateFilter:
    return DuplicateFilter(tuple(reader.dags()), datetime.now(timezone.utc) - since, risk=risk)


def duplicate_slots(
    reader: Reader, *, since: timedelta, risk: str | None = None, limit: int = 100
) -> tuple[int, list[DuplicateSlot]]:
    """``(total, highest risk and newest first up to limit)`` duplicates of readable DAGs."""
    total, reports = digest.duplicates(reader.store, _duplicates(reader, since, risk), limit=limit)
    return total, [_slot(r) for r in reports]


def risk_counts(reader: Reader, *, since: timedelta) -> dict[str, int]:
    """Duplicates of readable DAGs by risk, highest risk first, every risk present."""
    counts = digest.risk_counts(reader.store, _duplicates(reader, since))
    return {risk: counts.get(risk, 0) for risk in reversed(RISKS)}


def timeline(
    store: Store,
    allowed: frozenset[str],
    *,
    dag_id: str,
    task_id: str,
    map_index: int = -1,
    partition: str | None = None,
    run_id: str | None = None,
) -> Timeline | None:
    """One slot's executions (by partition, or by a run of it), or None if unknown or not readable.

    Only the slot's own runs are read (two indexed statements), however many runs the task has.
    """
    if dag_id not in allowed or (partition is None and run_id is None):
        return None
    with store.transaction(immediate=False) as db:
        if partition is None:
            assert run_id is not None
            partition = slot_partition_of(
                db, dag_id=dag_id, task_id=task_id, map_index=map_index, run_id=run_id
            )
        rows = partition_rows(db, dag_id=dag_id, task_id=task_id, map_index=map_index, partition=partition)
    runs_of: dict[str, str] = {}
    for r in rows:  # a run's partition is on its process rows; placeholders carry ''
        if r.get("slot_partition"):
            runs_of[str(r["run_id"])] = str(r["slot_partition"])
    mine = [r for r in rows if runs_of.get(str(r["run_id"]), str(r["run_id"])) == partition]
    if not mine:
        return None
    report = digest.slot_report(store, (dag_id, task_id, map_index, partition))
    executions = list(report.executions) if report else executions_of(mine)
    if not executions:
        return None
    return Timeline(
        dag_id=dag_id,
        task_id=task_id,
        map_index=map_index,
        partition=partition,
        protection=report.protection if report else "-",
        risk=report.risk if report else "none",
        executions=[_execution(e) for e in executions],
        reruns=[
            RerunOut(
                earlier_try=r.earlier.try_number,
                later_try=r.later.try_number,
                earlier_pid=r.earlier.pid,
                later_pid=r.later.pid,
                kinds=list(r.kinds),
                overlap_seconds=r.overlap_seconds,
            )
            for r in (report.reruns if report else ())
        ],
        outages=[],
    )


def with_outages(timeline: Timeline, outages: Iterable[Outage]) -> Timeline:
    """``timeline`` with the outages that touch the span its executions were alive in."""
    first = min(e.started_at for e in timeline.executions)
    last = max(e.alive_until for e in timeline.executions)
    around = [o for o in outages if o.started_at <= last and (o.ended_at or last) >= first]
    return timeline.model_copy(update={"outages": around})


def ledger_entries(
    reader: Reader, *, state: str | None = None, limit: int = 500
) -> tuple[int, list[LedgerEntryOut]]:
    """``(total, newest intent first up to limit)`` idempotency keys of readable DAGs in ``state``.

    Filtered, counted and limited in the store's SQL; requests never leave the store.
    """
    with reader.store.transaction(immediate=False) as db:
        total, entries = ledger.page_entries(db, dag_ids=reader.dags(), state=state, limit=limit)
    return total, [
        LedgerEntryOut(
            idem_key=e.idem_key,
            dag_id=e.dag_id,
            task_id=e.task_id,
            map_index=e.map_index,
            partition=e.slot_partition,
            target=e.target,
            version=e.version,
            state=e.state,
            vendor_status=e.response_status,
            send_count=e.send_count,
            replay_count=e.replay_count,
            try_number=e.try_number,
            hostname=e.hostname,
            intent_at=e.intent_at,
            outcome_at=e.outcome_at,
            result=redact(e.result),
            error=None if e.error is None else str(redact(e.error)),
        )
        for e in entries
    ]


def fence_counts(reader: Reader) -> dict[str, int]:
    """How many fence rejections and skipped committed writes the readable DAGs recorded."""
    with reader.store.transaction(immediate=False) as db:
        return events.count_by_kind(db, dag_ids=reader.dags(), kinds=FENCE_KINDS)


def fence_events(
    reader: Reader, *, kind: str | None = None, limit: int = 500
) -> tuple[int, list[FenceEvent]]:
    """Fence rejections and skipped committed work of readable DAGs, newest first (SQL-limited)."""
    kinds = [kind] if kind in FENCE_KINDS else list(FENCE_KINDS)
    with reader.store.transaction(immediate=False) as db:
        total, rows = events.page(db, dag_ids=reader.dags(), kinds=kinds, limit=limit)
    return total, [
        FenceEvent(
            id=int(e["id"]),
            kind=str(e["kind"]),
            dag_id=str(e["dag_id"]),
            task_id=str(e["task_id"]),
            map_index=int(e["map_index"]),
            partition=str(e["slot_partition"]),
            target=str(e["target"]),
            run_id=e["run_id"],
            try_number=e["try_number"],
            hostname=e["hostname"],
            pid=e["pid"],
            token=e["token"],
            created_at=str(e["created_at"]),
            detail=dict(redact(e["detail"]) or {}),
        )
        for e in rows
    ]


#: The scan's verdicts, risky first (docs/scan.md).
SCAN_VERDICTS = ("risky", "unknown", "safe", "protected")
#: How many duplicated slots the risk map reads from the digest to count runs per task.
_RISK_DUPLICATES = 5000


def risk_map(
    reader: Reader, *, verdict: str | None, since: timedelta, limit: int = 500
) -> tuple[int, list[RiskTask]]:
    """``(total, risky first up to limit)`` tasks of readable DAGs from their latest recorded scan,
    each with the slots the audit saw it run more than once within ``since`` (and how many harmfully)."""
    verdicts = [verdict] if verdict in SCAN_VERDICTS else list(SCAN_VERDICTS)
    with reader.store.transaction(immediate=False) as db:
        total, rows = scans.page(db, dag_ids=reader.dags(), verdicts=verdicts, limit=limit)
    runs: dict[tuple[str, str], list[int]] = {}
    if rows:
        refresh_digest(reader.store)
        _, reports = digest.duplicates(reader.store, _duplicates(reader, since), limit=_RISK_DUPLICATES)
        for r in reports:
            counts = runs.setdefault((r.dag_id, r.task_id), [0, 0])
            counts[0] += 1
            counts[1] += r.risk in ("high", "critical")
    items = []
    for row in rows:
        duplicated, harmful = runs.get((row["dag_id"], row["task_id"]), [0, 0])
        scanned_at = datetime.fromtimestamp(float(row.pop("scanned_at")), tz=timezone.utc)
        items.append(
            RiskTask(**row, scanned_at=scanned_at, duplicated_slots=duplicated, harmful_slots=harmful)
        )
    return total, items
