"""``crashsafe_scan_results``: the latest scan verdict of each task, per DAG (docs/scan.md).

``airflow-crashsafe scan --record`` replaces the rows of every DAG it scanned, so each DAG keeps
the result of its latest scan; the UI's risk map reads them, filtered to the DAGs a user may read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.values import in_list

__all__ = ["SCAN_FIELDS", "SCAN_TABLE", "ddl", "page", "record", "record_task"]

SCAN_TABLE = "crashsafe_scan_results"
SCAN_FIELDS = (
    "dag_id",
    "task_id",
    "file",
    "line",
    "operator",
    "verdict",
    "category",
    "reasons",
    "fix",
    "scanned_at",
)
_ORDER = (
    "CASE verdict WHEN 'risky' THEN 0 WHEN 'unknown' THEN 1 WHEN 'safe' THEN 2 ELSE 3 END, dag_id, task_id"
)


def ddl(dialect: str) -> tuple[str, ...]:
    """The table and its index, for the schema's migration (``scanned_at``: seconds since the epoch)."""
    real = "DOUBLE PRECISION" if dialect == "postgresql" else "REAL"
    return (
        f"""CREATE TABLE {SCAN_TABLE} (
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, file TEXT NOT NULL, line INTEGER,
    operator TEXT NOT NULL, verdict TEXT NOT NULL, category TEXT NOT NULL,
    reasons TEXT NOT NULL DEFAULT '[]', fix TEXT NOT NULL DEFAULT '', scanned_at {real} NOT NULL,
    PRIMARY KEY (dag_id, task_id))""",
        f"CREATE INDEX crashsafe_scan_results_verdict ON {SCAN_TABLE} (verdict, dag_id)",
    )


def record(db: Db, tasks: Sequence[Mapping[str, Any]], *, scanned_at: float) -> int:
    """Replace the rows of every DAG in ``tasks`` with these; how many rows were written."""
    dag_ids = sorted({str(t["dag_id"]) for t in tasks})
    if not dag_ids:
        return 0
    names, params = in_list("d", dag_ids)
    db.execute(f"DELETE FROM {SCAN_TABLE} WHERE dag_id IN ({names})", params)
    columns = ", ".join(SCAN_FIELDS)
    values = ", ".join(f"%({f})s" for f in SCAN_FIELDS)
    seen: set[tuple[str, str]] = set()
    for t in tasks:
        key = (str(t["dag_id"]), str(t["task_id"]))
        if key in seen:
            continue
        seen.add(key)
        row = {f: t.get(f) for f in SCAN_FIELDS}
        row.update(
            reasons=json.dumps(t.get("reasons") or []), fix=str(t.get("fix") or ""), scanned_at=scanned_at
        )
        db.execute(f"INSERT INTO {SCAN_TABLE} ({columns}) VALUES ({values})", row)
    return len(seen)


def record_task(db: Db, task: Mapping[str, Any], *, scanned_at: float) -> None:
    """Replace one task's row (the cluster policy records each risky task it sees at parse time)."""
    db.execute(
        f"DELETE FROM {SCAN_TABLE} WHERE dag_id = %(dag_id)s AND task_id = %(task_id)s",
        {"dag_id": task["dag_id"], "task_id": task["task_id"]},
    )
    columns = ", ".join(SCAN_FIELDS)
    values = ", ".join(f"%({f})s" for f in SCAN_FIELDS)
    row = {f: task.get(f) for f in SCAN_FIELDS}
    row.update(
        reasons=json.dumps(task.get("reasons") or []), fix=str(task.get("fix") or ""), scanned_at=scanned_at
    )
    db.execute(f"INSERT INTO {SCAN_TABLE} ({columns}) VALUES ({values})", row)


def page(
    db: Db, *, dag_ids: Sequence[str], verdicts: Sequence[str], limit: int
) -> tuple[int, list[dict[str, Any]]]:
    """``(total, risky first up to limit)`` latest verdicts of the DAGs ``dag_ids`` in ``verdicts``."""
    if not dag_ids or not verdicts:
        return 0, []
    dag_names, params = in_list("d", dag_ids)
    verdict_names, verdict_params = in_list("v", verdicts)
    params.update(verdict_params, limit=limit)
    where = f"dag_id IN ({dag_names}) AND verdict IN ({verdict_names})"
    total = int(db.execute(f"SELECT count(*) FROM {SCAN_TABLE} WHERE {where}", params).fetchone()[0])
    rows = db.execute(
        f"SELECT {', '.join(SCAN_FIELDS)} FROM {SCAN_TABLE} WHERE {where} ORDER BY {_ORDER} LIMIT %(limit)s",
        params,
    ).fetchall()
    found = [dict(zip(SCAN_FIELDS, row, strict=True)) for row in rows]
    for r in found:
        r["reasons"] = json.loads(r["reasons"] or "[]")
    return total, found
