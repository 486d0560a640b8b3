"""Reading ``crashsafe_events`` for people: filtered, counted, ordered and limited in SQL.

The UI lists fence rejections and skipped committed work of the DAGs a user may read; with
hundreds of thousands of events, loading them all to filter and sort in Python took seconds. Every
read here takes the DAG and kind filters, the order and the limit into one statement, served by
the ``crashsafe_events_kind`` index, ``(kind, dag_id, id)`` (schema version 6). Writes stay in
:meth:`Store.record_event <airflow_crashsafe.store.store.Store.record_event>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.values import in_list

__all__ = ["EVENT_FIELDS", "INSERT_EVENT", "count_by_kind", "page", "record_many"]

INSERT_EVENT = """
INSERT INTO crashsafe_events (kind, dag_id, task_id, map_index, slot_partition, target, run_id,
    try_number, ti_id, clear_number, hostname, pid, token, detail)
VALUES (%(kind)s, %(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(target)s,
    %(run_id)s, %(try_number)s, %(ti_id)s, %(clear_number)s, %(hostname)s, %(pid)s, %(token)s,
    %(detail)s)"""

EVENT_FIELDS = (
    "id",
    "kind",
    "dag_id",
    "task_id",
    "map_index",
    "slot_partition",
    "target",
    "run_id",
    "try_number",
    "ti_id",
    "clear_number",
    "hostname",
    "pid",
    "token",
    "detail",
    "created_at",
)


def record_many(db: Db, rows: Iterable[Mapping[str, Any]]) -> None:
    """Insert many events at once inside the caller's transaction (benchmarks, imports).

    Each row has :data:`INSERT_EVENT`'s parameters, ``detail`` a JSON string.
    """
    cursor = db.raw.cursor()
    cursor.executemany(db.dialect.adapt(INSERT_EVENT), [dict(row) for row in rows])


def _where(dag_ids: Sequence[str], kinds: Sequence[str], params: dict[str, Any]) -> str:
    kind_names, kind_params = in_list("k", kinds)
    dag_names, dag_params = in_list("d", dag_ids)
    params.update(kind_params, **dag_params)
    return f"kind IN ({kind_names}) AND dag_id IN ({dag_names})"


def count_by_kind(db: Db, *, dag_ids: Sequence[str], kinds: Sequence[str]) -> dict[str, int]:
    """How many events of each of ``kinds`` the DAGs ``dag_ids`` recorded (kinds with none omitted)."""
    if not dag_ids or not kinds:
        return {}
    params: dict[str, Any] = {}
    sql = f"SELECT kind, count(*) FROM crashsafe_events WHERE {_where(dag_ids, kinds, params)} GROUP BY kind"
    return {str(kind): int(n) for kind, n in db.execute(sql, params).fetchall()}


#: Up to this many (kind, DAG) pairs, the newest events are merged from one index range per pair.
_MAX_PAIRS = 100


def _newest_ids(dag_ids: Sequence[str], kinds: Sequence[str], params: dict[str, Any]) -> str:
    """SQL for the ids of the newest ``%(limit)s`` matching events, read from index ranges only.

    Each (kind, DAG) pair - or each kind, past :data:`_MAX_PAIRS` pairs (SQLite caps a compound
    SELECT at 500 parts) - is its own backward range of ``crashsafe_events_kind`` cut at the limit,
    and the ranges are merged: a DAG with few events behind many of others' costs no scan of them.
    """
    dag_names, dag_params = in_list("d", dag_ids)
    params.update(dag_params)
    params.update(in_list("k", kinds)[1])
    if len(dag_ids) * len(kinds) <= _MAX_PAIRS:
        ranges = [
            f"kind = %(k{k})s AND dag_id = %(d{d})s" for k in range(len(kinds)) for d in range(len(dag_ids))
        ]
    else:
        ranges = [f"kind = %(k{k})s AND dag_id IN ({dag_names})" for k in range(len(kinds))]
    union = " UNION ALL ".join(
        f"SELECT id FROM (SELECT id FROM crashsafe_events WHERE {where}"
        f" ORDER BY id DESC LIMIT %(limit)s) r{i}"
        for i, where in enumerate(ranges)
    )
    return f"SELECT id FROM ({union}) AS newest ORDER BY id DESC LIMIT %(limit)s"


def page(
    db: Db, *, dag_ids: Sequence[str], kinds: Sequence[str], limit: int
) -> tuple[int, list[dict[str, Any]]]:
    """``(total, newest first up to limit)`` events of ``kinds`` recorded by the DAGs ``dag_ids``."""
    if not dag_ids or not kinds:
        return 0, []
    params: dict[str, Any] = {"limit": limit}
    where = _where(dag_ids, kinds, params)
    total = int(db.execute(f"SELECT count(*) FROM crashsafe_events WHERE {where}", params).fetchone()[0])
    rows = db.execute(
        f"SELECT {', '.join(EVENT_FIELDS)} FROM crashsafe_events"
        f" WHERE id IN ({_newest_ids(dag_ids, kinds, params)}) ORDER BY id DESC",
        params,
    ).fetchall()
    events = [dict(zip(EVENT_FIELDS, row, strict=True)) for row in rows]
    for event in events:
        event["detail"] = json.loads(event["detail"] or "{}")
    return total, events
