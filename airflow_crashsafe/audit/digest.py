"""The duplicate digest: every slot that executed more than once, classified once, kept current.

Classifying every recorded attempt on each page view costs about a second at 10,000 attempts, so
the classification is kept in the store instead (migration 5). Every attempt write marks its task
instance dirty in the same transaction (:func:`~airflow_crashsafe.audit.records.mark_dirty`);
:func:`refresh` reclassifies only the slots of dirty task instances, from their own rows and the
protection evidence of their tasks, and upserts one ``crashsafe_duplicates`` row per duplicated
slot. Readers then run bounded, indexed queries (:func:`duplicates`, :func:`risk_counts`,
:func:`slot_report`). A refresh deletes a dirty mark only if its ``gen`` is still the one it
read, so a write racing the refresh is picked up by the next one; refreshers running at once
(several api-server workers) upsert the same classification. This module holds the SQL of the
two tables (store layer for the audit, like :mod:`~airflow_crashsafe.audit.records`).

Known limit: evidence recorded later in *other* runs of a task ("fenced in other runs") reaches a
slot at its next change, not at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_crashsafe.audit.classify import RISKS, Execution, Rerun, SlotReport, classify
from airflow_crashsafe.audit.protection import Evidence
from airflow_crashsafe.audit.records import FIELDS, _from_db, _to_db
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.store import Store

__all__ = ["Refreshed", "duplicates", "refresh", "risk_counts", "slot_report"]

_TaskKey = tuple[str, str, int]
_SlotKey = tuple[str, str, int, str]
_COLUMNS = (
    "dag_id",
    "task_id",
    "map_index",
    "slot_partition",
    "risk",
    "risk_rank",
    "kinds",
    "overlap_seconds",
    "protection",
    "runs",
    "first_started_at",
    "last_active_at",
    "report",
)
_EXECUTION_STAMPS = ("started_at", "ended_at", "last_seen_at", "terminated_at")


@dataclass(frozen=True)
class Refreshed:
    """What one refresh did: task instances reclassified, and marks left for a later one."""

    task_instances: int
    pending: int


def _in(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f"%({n})s" for n in names), dict(zip(names, values, strict=True))


def _rows_of(db: Db, task: _TaskKey, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Every row of the slots the given runs of one task belong to (their partitions' other runs too)."""
    runs, params = _in("r", run_ids)
    params.update({"d": task[0], "t": task[1], "m": task[2]})
    same_task = "dag_id = %(d)s AND task_id = %(t)s AND map_index = %(m)s"
    sql = (
        f"SELECT {', '.join(FIELDS)} FROM crashsafe_attempts WHERE {same_task} AND (run_id IN ({runs})"
        f" OR slot_partition IN (SELECT slot_partition FROM crashsafe_attempts WHERE {same_task}"
        f" AND run_id IN ({runs}) AND slot_partition <> ''))"
    )
    return [_from_db(dict(zip(FIELDS, r, strict=True))) for r in db.execute(sql, params).fetchall()]


def _evidence(
    db: Db, dag_id: str, task_ids: Sequence[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Fence events and ledger entries of some tasks of one DAG: what ``Evidence`` indexes."""
    tasks, params = _in("t", task_ids)
    params["d"] = dag_id
    where = f"dag_id = %(d)s AND task_id IN ({tasks})"
    cols = ("dag_id", "task_id", "map_index", "slot_partition", "run_id")
    events = db.execute(
        f"SELECT DISTINCT kind, {', '.join(cols)} FROM crashsafe_events WHERE {where}"
        " AND kind IN ('committed', 'fenced_out', 'skipped_committed')",
        params,
    ).fetchall()
    entries = db.execute(f"SELECT DISTINCT {', '.join(cols)} FROM crashsafe_ledger WHERE {where}", params)
    return (
        [dict(zip(("kind", *cols), r, strict=True)) for r in events],
        [dict(zip(cols, r, strict=True)) for r in entries.fetchall()],
    )


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


def _report_from_row(row: Mapping[str, Any]) -> SlotReport:
    data = json.loads(row["report"])
    runs = tuple(_execution_from_json(e) for e in data["executions"])
    return SlotReport(
        dag_id=str(row["dag_id"]),
        task_id=str(row["task_id"]),
        map_index=int(row["map_index"]),
        partition=str(row["slot_partition"]),
        executions=runs,
        reruns=tuple(
            Rerun(earlier=runs[a], later=runs[b], kinds=tuple(kinds), overlap_seconds=float(overlap))
            for a, b, kinds, overlap in data["reruns"]
        ),
        protection=str(row["protection"]),
        protection_evidence=tuple(data["evidence"]),
        risk=str(row["risk"]),
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


def _save(db: Db, task: _TaskKey, rows: list[dict[str, Any]], reports: list[SlotReport]) -> None:
    """Replace the digest rows of every slot these rows touch (one that is no longer a duplicate,
    or whose partition became known, goes)."""
    touched = sorted(({str(r["slot_partition"]) for r in rows} | {str(r["run_id"]) for r in rows}) - {""})
    parts, params = _in("p", touched)
    params.update({"d": task[0], "t": task[1], "m": task[2]})
    db.execute(
        "DELETE FROM crashsafe_duplicates WHERE dag_id = %(d)s AND task_id = %(t)s AND map_index = %(m)s"
        f" AND slot_partition IN ({parts})",
        params,
    )
    for r in reports:
        values = {
            "dag_id": r.dag_id,
            "task_id": r.task_id,
            "map_index": r.map_index,
            "slot_partition": r.partition,
            "risk": r.risk,
            "risk_rank": RISKS.index(r.risk),
            "kinds": ",".join(r.kinds),
            "overlap_seconds": float(r.overlap_seconds),
            "protection": r.protection,
            "runs": len(r.executions),
            "first_started_at": _to_db(db, r.executions[0].started_at),
            "last_active_at": _to_db(db, _last_active(rows, r)),
            "report": _report_json(r),
        }
        db.execute(
            f"INSERT INTO crashsafe_duplicates ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join(f'%({c})s' for c in _COLUMNS)})",
            values,
        )


def _refresh_chunk(store: Store, chunk: int) -> int:
    """Reclassify the task instances of up to ``chunk`` dirty marks in one transaction."""
    with store.transaction() as db:
        marks = db.execute(
            "SELECT dag_id, task_id, map_index, run_id, gen FROM crashsafe_audit_dirty"
            " ORDER BY dag_id, task_id, map_index, run_id LIMIT %(n)s",
            {"n": chunk},
        ).fetchall()
        runs: dict[_TaskKey, list[str]] = {}
        for dag_id, task_id, map_index, run_id, _gen in marks:
            runs.setdefault((str(dag_id), str(task_id), int(map_index)), []).append(str(run_id))
        tasks_by_dag: dict[str, list[str]] = {}
        for dag_id, task_id, _ in runs:
            tasks_by_dag.setdefault(dag_id, []).append(task_id)
        evidence = {dag: Evidence(*_evidence(db, dag, sorted(set(ts)))) for dag, ts in tasks_by_dag.items()}
        for task, run_ids in runs.items():
            rows = _rows_of(db, task, run_ids)
            if rows:
                _save(db, task, rows, classify(rows, evidence[task[0]]))
        for dag_id, task_id, map_index, run_id, gen in marks:
            db.execute(
                "DELETE FROM crashsafe_audit_dirty WHERE dag_id = %(d)s AND task_id = %(t)s"
                " AND map_index = %(m)s AND run_id = %(r)s AND gen = %(g)s",
                {"d": dag_id, "t": task_id, "m": map_index, "r": run_id, "g": gen},
            )
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
                pending = int(db.execute("SELECT count(*) FROM crashsafe_audit_dirty").fetchone()[0])
            return Refreshed(task_instances=done, pending=pending)


def _where(
    db: Db, allowed: Iterable[str], since: datetime, dag_id: str | None, risk: str | None
) -> tuple[str, dict[str, Any]]:
    dags, params = _in("a", sorted(allowed))
    where = f"dag_id IN ({dags}) AND last_active_at >= %(since)s"
    params["since"] = _to_db(db, since)
    if dag_id is not None:
        where += " AND dag_id = %(dag_id)s"
        params["dag_id"] = dag_id
    if risk is not None:
        where += " AND risk = %(risk)s"
        params["risk"] = risk
    return where, params


def duplicates(
    store: Store,
    allowed: Iterable[str],
    *,
    since: datetime,
    dag_id: str | None = None,
    risk: str | None = None,
    limit: int = 100,
) -> tuple[int, list[SlotReport]]:
    """``(total, up to limit)`` duplicated slots of the ``allowed`` DAGs, highest risk, newest first."""
    allowed = list(allowed)
    if not allowed:
        return 0, []
    with store.transaction(immediate=False) as db:
        where, params = _where(db, allowed, since, dag_id, risk)
        total = int(
            db.execute(f"SELECT count(*) FROM crashsafe_duplicates WHERE {where}", params).fetchone()[0]
        )
        found = db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM crashsafe_duplicates WHERE {where}"
            " ORDER BY risk_rank DESC, first_started_at DESC LIMIT %(limit)s",
            {**params, "limit": limit},
        ).fetchall()
    return total, [_report_from_row(dict(zip(_COLUMNS, r, strict=True))) for r in found]


def risk_counts(store: Store, allowed: Iterable[str], *, since: datetime) -> dict[str, int]:
    """Duplicated slots of the ``allowed`` DAGs by risk."""
    allowed = list(allowed)
    if not allowed:
        return {}
    with store.transaction(immediate=False) as db:
        where, params = _where(db, allowed, since, None, None)
        found = db.execute(
            f"SELECT risk, count(*) FROM crashsafe_duplicates WHERE {where} GROUP BY risk", params
        ).fetchall()
    return {str(risk): int(n) for risk, n in found}


def slot_report(store: Store, slot: _SlotKey) -> SlotReport | None:
    """One slot's classification, None when it executed only once."""
    with store.transaction(immediate=False) as db:
        found = db.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM crashsafe_duplicates WHERE dag_id = %(d)s"
            " AND task_id = %(t)s AND map_index = %(m)s AND slot_partition = %(p)s",
            {"d": slot[0], "t": slot[1], "m": slot[2], "p": slot[3]},
        ).fetchone()
    return None if found is None else _report_from_row(dict(zip(_COLUMNS, found, strict=True)))
