"""The task instances whose attempt records changed since the duplicate digest last saw them.

Every write to ``crashsafe_attempts`` marks its task instance here in the same transaction; the
digest (:mod:`airflow_crashsafe.audit.digest`) reclassifies the slots of marked task instances
and then clears their marks. Each mark carries a generation that grows on every change, and a
mark is cleared only at the generation the digest read: a write racing a refresh keeps its mark
for the next one. See docs/design.md, "Audit".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.values import in_list

__all__ = ["DirtyMark", "clear", "mark", "marks", "pending"]


@dataclass(frozen=True)
class DirtyMark:
    """One changed task instance, at the generation it was read."""

    dag_id: str
    task_id: str
    map_index: int
    run_id: str
    gen: int


def mark(db: Db, key: Mapping[str, Any]) -> None:
    """Note that a task instance's records changed (``key`` names its dag, task, map index, run)."""
    db.execute(
        "INSERT INTO crashsafe_audit_dirty (dag_id, task_id, map_index, run_id) "
        "VALUES (%(dag_id)s, %(task_id)s, %(map_index)s, %(run_id)s) "
        "ON CONFLICT (dag_id, task_id, map_index, run_id) DO UPDATE SET gen = crashsafe_audit_dirty.gen + 1",
        {k: key[k] for k in ("dag_id", "task_id", "map_index", "run_id")},
    )


def marks(db: Db, *, limit: int) -> list[DirtyMark]:
    """Up to ``limit`` marks, in key order (refreshers running at once take the same ones)."""
    found = db.execute(
        "SELECT dag_id, task_id, map_index, run_id, gen FROM crashsafe_audit_dirty"
        " ORDER BY dag_id, task_id, map_index, run_id LIMIT %(n)s",
        {"n": limit},
    ).fetchall()
    return [DirtyMark(str(d), str(t), int(m), str(r), int(g)) for d, t, m, r, g in found]


def clear(db: Db, seen: Iterable[DirtyMark]) -> None:
    """Delete each mark that is still at the generation it was read."""
    for m in seen:
        db.execute(
            "DELETE FROM crashsafe_audit_dirty WHERE dag_id = %(d)s AND task_id = %(t)s"
            " AND map_index = %(m)s AND run_id = %(r)s AND gen = %(g)s",
            {"d": m.dag_id, "t": m.task_id, "m": m.map_index, "r": m.run_id, "g": m.gen},
        )


def pending(db: Db, *, dag_ids: Sequence[str] | None = None) -> int:
    """How many task instances wait to be reclassified (of the DAGs ``dag_ids`` when given)."""
    if dag_ids is None:
        return int(db.execute("SELECT count(*) FROM crashsafe_audit_dirty").fetchone()[0])
    if not dag_ids:
        return 0
    names, params = in_list("d", dag_ids)
    sql = f"SELECT count(*) FROM crashsafe_audit_dirty WHERE dag_id IN ({names})"
    return int(db.execute(sql, params).fetchone()[0])
