"""The ``crashsafe_duplicates`` table: the duplicate digest, one row per slot that ran twice or more.

The audit's digest (:mod:`airflow_crashsafe.audit.digest`) decides what a row says; this module
only stores and reads rows. The classification itself travels as JSON in ``report``; the other
columns exist to filter and order on (risk, activity, DAG) with indexed, bounded queries, and are
always read filtered to the DAGs the caller may see. See docs/design.md, "Audit".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, fields
from datetime import datetime
from typing import Any

from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.values import in_list, stamps_from_db, to_db

__all__ = [
    "DuplicateFilter",
    "DuplicateRow",
    "count",
    "page",
    "replace_task_slots",
    "risk_counts",
    "slot_row",
]


@dataclass(frozen=True)
class DuplicateRow:
    """One digest row: a duplicated slot's classification, and what it is filtered on."""

    dag_id: str
    task_id: str
    map_index: int
    slot_partition: str
    risk: str
    risk_rank: int  # the risk's place from lowest to highest, for ORDER BY
    kinds: str  # comma-separated
    overlap_seconds: float
    protection: str
    runs: int
    first_started_at: datetime
    last_active_at: datetime  # the latest write to the slot's attempt rows
    report: str  # the whole classification, as JSON


@dataclass(frozen=True)
class DuplicateFilter:
    """Which slots a reader asks for: those of ``dags`` (the DAGs it may read and asked for) active
    since ``since``, of one risk or any.

    ``dags`` must not be empty (a reader who may read no DAG gets nothing without asking).
    """

    dags: tuple[str, ...]
    since: datetime
    risk: str | None = None


_COLUMNS = tuple(f.name for f in fields(DuplicateRow))
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM crashsafe_duplicates"


def _row(values: Sequence[Any]) -> DuplicateRow:
    row = stamps_from_db(dict(zip(_COLUMNS, values, strict=True)), ("first_started_at", "last_active_at"))
    return DuplicateRow(**row)


def replace_task_slots(
    db: Db,
    *,
    dag_id: str,
    task_id: str,
    map_index: int,
    partitions: Sequence[str],
    rows: Iterable[DuplicateRow],
) -> None:
    """Replace the rows of one task's slots ``partitions`` by ``rows`` (a slot left out goes)."""
    parts, params = in_list("p", partitions)
    params.update({"d": dag_id, "t": task_id, "m": map_index})
    db.execute(
        "DELETE FROM crashsafe_duplicates WHERE dag_id = %(d)s AND task_id = %(t)s AND map_index = %(m)s"
        f" AND slot_partition IN ({parts})",
        params,
    )
    for row in rows:
        db.execute(
            f"INSERT INTO crashsafe_duplicates ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join(f'%({c})s' for c in _COLUMNS)})",
            dict(zip(_COLUMNS, (to_db(db, v) for v in astuple(row)), strict=True)),
        )


def _where(db: Db, wanted: DuplicateFilter) -> tuple[str, dict[str, Any]]:
    dags, params = in_list("a", sorted(wanted.dags))
    where = f"dag_id IN ({dags}) AND last_active_at >= %(since)s"
    params["since"] = to_db(db, wanted.since)
    if wanted.risk is not None:
        where += " AND risk = %(risk)s"
        params["risk"] = wanted.risk
    return where, params


def count(db: Db, wanted: DuplicateFilter) -> int:
    """How many slots match."""
    where, params = _where(db, wanted)
    return int(db.execute(f"SELECT count(*) FROM crashsafe_duplicates WHERE {where}", params).fetchone()[0])


def page(db: Db, wanted: DuplicateFilter, *, limit: int) -> list[DuplicateRow]:
    """Up to ``limit`` matching slots, highest risk first, then the newest first start."""
    where, params = _where(db, wanted)
    found = db.execute(
        f"{_SELECT} WHERE {where} ORDER BY risk_rank DESC, first_started_at DESC LIMIT %(limit)s",
        {**params, "limit": limit},
    ).fetchall()
    return [_row(r) for r in found]


def risk_counts(db: Db, wanted: DuplicateFilter) -> dict[str, int]:
    """Matching slots counted by risk."""
    where, params = _where(db, wanted)
    found = db.execute(
        f"SELECT risk, count(*) FROM crashsafe_duplicates WHERE {where} GROUP BY risk", params
    ).fetchall()
    return {str(risk): int(n) for risk, n in found}


def slot_row(db: Db, *, dag_id: str, task_id: str, map_index: int, partition: str) -> DuplicateRow | None:
    """One slot's row, None when it executed only once."""
    found = db.execute(
        f"{_SELECT} WHERE dag_id = %(d)s AND task_id = %(t)s AND map_index = %(m)s"
        " AND slot_partition = %(p)s",
        {"d": dag_id, "t": task_id, "m": map_index, "p": partition},
    ).fetchone()
    return None if found is None else _row(found)
