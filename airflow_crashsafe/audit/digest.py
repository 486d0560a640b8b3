"""The duplicate digest: every slot that executed more than once, classified once, kept current.

Classifying every recorded attempt on each page view costs about a second at 10,000 attempts, so
the classification is kept in the store instead (``crashsafe_duplicates``,
:mod:`airflow_crashsafe.store.duplicates`). Every attempt write marks its task instance changed in
the same transaction (:mod:`airflow_crashsafe.store.dirty`); :func:`refresh` reclassifies only the
slots of changed task instances, from their own rows and the protection evidence of their tasks,
and replaces their digest rows. Readers then run bounded, indexed queries (:func:`duplicates`,
:func:`risk_counts`, :func:`slot_report`). A refresh clears a mark only at the generation it
read, so a write racing the refresh is picked up by the next one; refreshers running at once
(several api-server workers) store the same classification. See docs/design.md, "Audit".

Known limit: evidence recorded later in *other* runs of a task ("fenced in other runs") reaches a
slot at its next change, not at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_crashsafe.audit.classify import RISKS, Execution, Rerun, SlotReport, classify
from airflow_crashsafe.audit.protection import Evidence
from airflow_crashsafe.store import attempts, dirty
from airflow_crashsafe.store import duplicates as digest_rows
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.duplicates import DuplicateFilter, DuplicateRow
from airflow_crashsafe.store.evidence import protection_records
from airflow_crashsafe.store.store import Store

__all__ = ["Refreshed", "duplicates", "refresh", "risk_counts", "slot_report"]

_TaskKey = tuple[str, str, int]
_SlotKey = tuple[str, str, int, str]
_EXECUTION_STAMPS = ("started_at", "ended_at", "last_seen_at", "terminated_at")


@dataclass(frozen=True)
class Refreshed:
    """What one refresh did: task instances reclassified, and marks left for a later one."""

    task_instances: int
    pending: int


def _execution_json(e: Execution) -> dict[str, Any]:
    data = dict(e.__dict__)
    for name in _EXECUTION_STAMPS:
        data[name] = data[name].isoformat() if data[name] is not None else None
    return data


def _execution_from_json(data: Mapping[str, Any]) -> Execution:
    values = dict(data)
    for name in _EXECUTION_STAMPS:
        values[name] = datetime.fromisoformat(values[name]) if values.get(name) else None
    return Execution(**values)


def _report_json(r: SlotReport) -> str:
    index = {id(e): i for i, e in enumerate(r.executions)}
    return json.dumps(
        {
            "executions": [_execution_json(e) for e in r.executions],
            "reruns": [
                [index[id(x.earlier)], index[id(x.later)], list(x.kinds), x.overlap_seconds] for x in r.reruns
            ],
            "evidence": list(r.protection_evidence),
        },
        sort_keys=True,
    )


def _report_from_row(row: DuplicateRow) -> SlotReport:
    data = json.loads(row.report)
    runs = tuple(_execution_from_json(e) for e in data["executions"])
    return SlotReport(
        dag_id=row.dag_id,
        task_id=row.task_id,
        map_index=int(row.map_index),
        partition=row.slot_partition,
        executions=runs,
        reruns=tuple(
            Rerun(earlier=runs[a], later=runs[b], kinds=tuple(kinds), overlap_seconds=float(overlap))
            for a, b, kinds, overlap in data["reruns"]
        ),
        protection=row.protection,
        protection_evidence=tuple(data["evidence"]),
        risk=row.risk,
    )


def _last_active(rows: Iterable[Mapping[str, Any]], report: SlotReport) -> datetime:
    """The latest write to the slot's rows: what "active in the last days" filters on."""
    parts = {str(r["run_id"]): str(r["slot_partition"]) for r in rows if r.get("slot_partition")}
    return max(
        r["updated_at"]
        for r in rows
        if (r["task_id"], int(r["map_index"])) == (report.task_id, report.map_index)
        and (parts.get(str(r["run_id"])) or str(r["run_id"])) == report.partition
    )


#: What a digest row takes from its report as it is.
_AS_IS = ("dag_id", "task_id", "map_index", "risk", "protection", "runs", "first_started_at")


def _digest_row(rows: list[dict[str, Any]], r: SlotReport) -> DuplicateRow:
    return DuplicateRow(
        **{name: getattr(r, name) for name in _AS_IS},
        slot_partition=r.partition,
        risk_rank=RISKS.index(r.risk),
        kinds=",".join(r.kinds),
        overlap_seconds=float(r.overlap_seconds),
        last_active_at=_last_active(rows, r),
        report=_report_json(r),
    )


def _reclassify(db: Db, task: _TaskKey, run_ids: list[str], evidence: Evidence) -> None:
    """Classify the slots these runs of one task belong to, and replace their digest rows (a slot
    that is no longer a duplicate, or whose partition became known, goes)."""
    dag_id, task_id, map_index = task
    rows = attempts.rows_of_runs(db, dag_id=dag_id, task_id=task_id, map_index=map_index, run_ids=run_ids)
    if not rows:
        return
    touched = sorted(({str(r["slot_partition"]) for r in rows} | {str(r["run_id"]) for r in rows}) - {""})
    digest_rows.replace_task_slots(
        db,
        dag_id=dag_id,
        task_id=task_id,
        map_index=map_index,
        partitions=touched,
        rows=[_digest_row(rows, r) for r in classify(rows, evidence)],
    )


def _refresh_chunk(store: Store, chunk: int) -> int:
    """Reclassify the task instances of up to ``chunk`` dirty marks in one transaction."""
    with store.transaction() as db:
        marks = dirty.marks(db, limit=chunk)
        runs: dict[_TaskKey, list[str]] = {}
        for m in marks:
            runs.setdefault((m.dag_id, m.task_id, m.map_index), []).append(m.run_id)
        tasks_by_dag: dict[str, list[str]] = {}
        for dag_id, task_id, _ in runs:
            tasks_by_dag.setdefault(dag_id, []).append(task_id)
        evidence = {
            dag: Evidence(*protection_records(db, dag, sorted(set(ts)))) for dag, ts in tasks_by_dag.items()
        }
        for task, run_ids in runs.items():
            _reclassify(db, task, run_ids, evidence[task[0]])
        dirty.clear(db, marks)
    return len(marks)


def refresh(store: Store, *, budget_seconds: float | None = None, chunk: int = 500) -> Refreshed:
    """Bring the digest up to date, or as far as ``budget_seconds`` allows.

    Works in whole chunks and stops before one that, taking as long as the last, would overrun
    the budget (the first chunk always runs: a refresh always makes progress).
    """
    began, done = time.monotonic(), 0
    while True:
        chunk_began = time.monotonic()
        n = _refresh_chunk(store, chunk)
        done += n
        if n < chunk:
            return Refreshed(task_instances=done, pending=0)
        now = time.monotonic()
        if budget_seconds is not None and now - began + (now - chunk_began) > budget_seconds:
            with store.transaction() as db:
                return Refreshed(task_instances=done, pending=dirty.pending(db))


def duplicates(store: Store, wanted: DuplicateFilter, *, limit: int = 100) -> tuple[int, list[SlotReport]]:
    """``(total, up to limit)`` duplicated slots that match, highest risk, newest first."""
    if not wanted.dags:
        return 0, []
    with store.transaction(immediate=False) as db:
        total = digest_rows.count(db, wanted)
        found = digest_rows.page(db, wanted, limit=limit)
    return total, [_report_from_row(r) for r in found]


def risk_counts(store: Store, wanted: DuplicateFilter) -> dict[str, int]:
    """Duplicated slots that match, by risk."""
    if not wanted.dags:
        return {}
    with store.transaction(immediate=False) as db:
        return digest_rows.risk_counts(db, wanted)


def slot_report(store: Store, slot: _SlotKey) -> SlotReport | None:
    """One slot's classification, None when it executed only once."""
    dag_id, task_id, map_index, partition = slot
    with store.transaction(immediate=False) as db:
        found = digest_rows.slot_row(
            db, dag_id=dag_id, task_id=task_id, map_index=map_index, partition=partition
        )
    return None if found is None else _report_from_row(found)
