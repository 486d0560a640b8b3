"""What crashsafe recorded that shows a task protected: fence events and ledger keys, per run.

The audit reads these to tell a fenced or ledgered re-run from an unprotected one
(:class:`airflow_crashsafe.audit.protection.Evidence`). Only the columns that place a record on a
slot or a run are read, never a request or a result. See docs/design.md, "Audit".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.values import in_list

__all__ = ["FENCE_EVENT_KINDS", "protection_records"]

#: The event kinds a fenced write leaves (see :data:`airflow_crashsafe.store.store.EVENT_KINDS`).
FENCE_EVENT_KINDS = ("committed", "fenced_out", "skipped_committed")
_PLACE = ("dag_id", "task_id", "map_index", "slot_partition", "run_id")


def protection_records(
    db: Db, dag_id: str, task_ids: Sequence[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(fence events, ledger entries)`` of some tasks of one DAG, each with where it happened."""
    tasks, params = in_list("t", task_ids)
    params["d"] = dag_id
    where = f"dag_id = %(d)s AND task_id IN ({tasks})"
    kinds, kind_params = in_list("k", FENCE_EVENT_KINDS)
    events = db.execute(
        f"SELECT DISTINCT kind, {', '.join(_PLACE)} FROM crashsafe_events"
        f" WHERE {where} AND kind IN ({kinds})",
        {**params, **kind_params},
    ).fetchall()
    entries = db.execute(f"SELECT DISTINCT {', '.join(_PLACE)} FROM crashsafe_ledger WHERE {where}", params)
    return (
        [dict(zip(("kind", *_PLACE), r, strict=True)) for r in events],
        [dict(zip(_PLACE, r, strict=True)) for r in entries.fetchall()],
    )
