"""The ``crashsafe_attempts`` table's SQL (store layer for the audit; migrations 3 and 4).

Every event is merged into its execution's row by :func:`merge_rows`, a commutative, idempotent
merge, so start, end, beacon and reconcile events converge whatever order they arrive in (a
spooled start delivered after its end, a reconcile racing the worker) and a re-delivered event
changes nothing. Precedence: the task process's own start and end beat the scheduler's, which
beat what reconciliation read from Airflow's history. An end the process did not report itself is
Airflow's estimate (a reset try's is the archive time), so it never lies before the process's own
last sign of life. Every write also marks its task instance dirty for the duplicate digest
(:mod:`airflow_crashsafe.audit.digest`), in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.store.dbapi import Db

__all__ = [
    "FIELDS",
    "KEY",
    "apply_event",
    "claim_alert",
    "mark_dirty",
    "merge_rows",
    "open_attempts",
    "slot_rows",
    "task_rows",
    "touch",
]

KEY = ("dag_id", "task_id", "map_index", "run_id", "try_number", "hostname", "pid")
VALUES = (
    "slot_partition",
    "ti_id",
    "clear_number",
    "started_at",
    "start_source",
    "ended_at",
    "end_source",
    "state",
    "state_source",
    "reported_state",
    "last_seen_at",
    "replay_safe",
    "operator",
    "terminated_at",
)
FIELDS = KEY + VALUES + ("updated_at",)
_STAMPS = ("started_at", "ended_at", "last_seen_at", "updated_at", "terminated_at")
_RANK = {None: 0, "reconcile": 1, "scheduler": 2, "listener": 3}
_TRY = (
    "dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s"
    " AND run_id = %(run_id)s AND try_number = %(try_number)s"
)


def _row_from_event(event: AttemptEvent) -> dict[str, Any]:
    data = asdict(event)
    source = data.pop("source")
    row = {name: data.get(name) for name in KEY + VALUES if name in data}
    row["start_source"] = source if event.started_at is not None else None
    row["end_source"] = source if event.ended_at is not None else None
    row["state_source"] = source if event.state is not None else None
    return row


def _pick(
    a: Mapping[str, Any], b: Mapping[str, Any], source: str, fields: Iterable[str], tie: Any
) -> dict[str, Any]:
    ra, rb = _RANK[a.get(source)], _RANK[b.get(source)]
    if ra != rb:
        win = a if ra > rb else b
        return {f: win.get(f) for f in fields}
    return {f: tie(a.get(f), b.get(f)) for f in fields}


def _first(x: Any, y: Any) -> Any:
    return x if x is not None else y


def _min(x: Any, y: Any) -> Any:
    return y if x is None else x if y is None else min(x, y)


def _max(x: Any, y: Any) -> Any:
    return y if x is None else x if y is None else max(x, y)


def merge_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Merge two records of one execution; order-independent and idempotent."""
    out = {k: a.get(k) for k in KEY}
    out["slot_partition"] = a.get("slot_partition") or b.get("slot_partition") or ""
    out.update(_pick(a, b, "start_source", ("started_at", "start_source", "ti_id", "clear_number"), _min))
    out.update(_pick(a, b, "end_source", ("ended_at", "end_source"), _max))
    out.update(_pick(a, b, "state_source", ("state", "state_source"), _max))
    out["reported_state"] = _first(a.get("reported_state"), b.get("reported_state"))
    out["last_seen_at"] = _max(a.get("last_seen_at"), b.get("last_seen_at"))
    safe = [v for v in (a.get("replay_safe"), b.get("replay_safe")) if v is not None]
    out["replay_safe"] = any(bool(v) for v in safe) if safe else None
    out["operator"] = _first(a.get("operator"), b.get("operator"))
    out["terminated_at"] = _min(a.get("terminated_at"), b.get("terminated_at"))
    if out["end_source"] not in (None, "listener"):
        out["ended_at"] = _max(out["ended_at"], out["last_seen_at"])
    return out


def _to_db(db: Db, value: Any) -> Any:
    if isinstance(value, datetime) and not db.dialect.is_postgres:
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, bool):
        return int(value)
    return value


def _from_db(row: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(row)
    for name in _STAMPS:
        value = out.get(name)
        if isinstance(value, str):
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if isinstance(value, datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        out[name] = value
    if out.get("replay_safe") is not None:
        out["replay_safe"] = bool(out["replay_safe"])
    return out


def _select(db: Db, where: str, params: Mapping[str, Any], *, lock: bool = False) -> list[dict[str, Any]]:
    sql = f"SELECT {', '.join(FIELDS)} FROM crashsafe_attempts WHERE {where}"
    if lock and db.dialect.is_postgres:
        sql += " FOR UPDATE"
    rows = db.execute(sql, params).fetchall()
    return [_from_db(dict(zip(FIELDS, r, strict=True))) for r in rows]


def _write(db: Db, row: Mapping[str, Any], *, insert: bool) -> None:
    params = {k: _to_db(db, row.get(k)) for k in KEY + VALUES}
    params["now"] = _to_db(db, datetime.now(timezone.utc))
    if insert:
        cols = KEY + VALUES
        db.execute(
            f"INSERT INTO crashsafe_attempts ({', '.join(cols)}, updated_at) "
            f"VALUES ({', '.join(f'%({c})s' for c in cols)}, %(now)s) "
            f"ON CONFLICT ({', '.join(KEY)}) DO NOTHING",
            params,
        )
        return
    sets = ", ".join(f"{c} = %({c})s" for c in VALUES)
    where = " AND ".join(f"{c} = %({c})s" for c in KEY)
    db.execute(f"UPDATE crashsafe_attempts SET {sets}, updated_at = %(now)s WHERE {where}", params)


def mark_dirty(db: Db, key: Mapping[str, Any]) -> None:
    """Note that a task instance's records changed: the digest reclassifies its slot."""
    db.execute(
        "INSERT INTO crashsafe_audit_dirty (dag_id, task_id, map_index, run_id) "
        "VALUES (%(dag_id)s, %(task_id)s, %(map_index)s, %(run_id)s) "
        "ON CONFLICT (dag_id, task_id, map_index, run_id) DO UPDATE SET gen = crashsafe_audit_dirty.gen + 1",
        {k: key[k] for k in ("dag_id", "task_id", "map_index", "run_id")},
    )


_TOUCH = """UPDATE crashsafe_attempts SET
    last_seen_at = CASE WHEN last_seen_at IS NULL OR last_seen_at < %(at)s THEN %(at)s ELSE last_seen_at END,
    ended_at = CASE WHEN end_source IN ('scheduler', 'reconcile') AND ended_at < %(at)s THEN %(at)s
        ELSE ended_at END,
    updated_at = %(now)s
WHERE dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s AND run_id = %(run_id)s
    AND try_number = %(try_number)s AND hostname = %(hostname)s AND pid = %(pid)s"""


def touch(db: Db, events: Iterable[AttemptEvent]) -> int:
    """Liveness beacons: raise ``last_seen_at`` of existing rows, one UPDATE each (as merge_rows would).

    A beacon for a row not stored yet (its start still spooled) changes nothing: the start carries
    its own sign of life. Returns how many rows were touched.
    """
    touched = 0
    now = _to_db(db, datetime.now(timezone.utc))
    for event in events:
        assert event.last_seen_at is not None
        params = {k: getattr(event, k) for k in KEY}
        cursor = db.execute(_TOUCH, {**params, "at": _to_db(db, event.last_seen_at), "now": now})
        if int(cursor.rowcount) > 0:
            touched += 1
            mark_dirty(db, params)
    return touched


def apply_event(db: Db, event: AttemptEvent) -> None:
    """Merge one event into its row(s), inside the caller's transaction.

    An event that names its process lands on that process's row (absorbing a placeholder row of
    the same try); one that does not (a history row without pid) lands on every row of its try,
    or on a placeholder row when none exists yet.
    """
    if db.dialect.is_postgres:
        # Audit rows are best effort and re-deliverable: do not wait for the WAL flush (~ms).
        db.execute("SET LOCAL synchronous_commit TO OFF")
    incoming = _row_from_event(event)
    key = {k: incoming[k] for k in ("dag_id", "task_id", "map_index", "run_id", "try_number")}
    mark_dirty(db, key)
    known = bool(event.hostname) and bool(event.pid)
    if known:
        _write(db, {**incoming, **dict.fromkeys(VALUES), "slot_partition": ""}, insert=True)
    rows = _select(db, _TRY, key, lock=True)
    if not known and not rows:
        _write(db, {**incoming, **dict.fromkeys(VALUES), "slot_partition": ""}, insert=True)
        rows = _select(db, _TRY, key, lock=True)
    if known:
        mine = [r for r in rows if r["hostname"] == event.hostname and r["pid"] == event.pid]
        placeholders = [r for r in rows if not r["hostname"] and not r["pid"]]
        merged = merge_rows(mine[0], incoming)
        for placeholder in placeholders:
            merged = merge_rows(merged, placeholder)
            db.execute(f"DELETE FROM crashsafe_attempts WHERE {_TRY} AND hostname = '' AND pid = 0", key)
        _write(db, merged, insert=False)
        return
    for row in rows:
        _write(db, merge_rows(row, incoming), insert=False)


def open_attempts(db: Db, *, started_before: datetime) -> list[dict[str, Any]]:
    """Executions with no recorded end that started before ``started_before`` (to reconcile)."""
    return _select(
        db,
        "ended_at IS NULL AND started_at IS NOT NULL AND started_at < %(before)s",
        {"before": _to_db(db, started_before)},
    )


def slot_rows(db: Db, *, since: datetime, dag_id: str | None = None) -> list[dict[str, Any]]:
    """Every row of every slot (or run) that had any activity since ``since``."""
    where = (
        "EXISTS (SELECT 1 FROM crashsafe_attempts b WHERE b.dag_id = crashsafe_attempts.dag_id"
        " AND b.task_id = crashsafe_attempts.task_id AND b.map_index = crashsafe_attempts.map_index"
        " AND (b.slot_partition = crashsafe_attempts.slot_partition OR b.run_id = crashsafe_attempts.run_id)"
        " AND b.updated_at >= %(since)s)"
    )
    params: dict[str, Any] = {"since": _to_db(db, since)}
    if dag_id is not None:
        where += " AND dag_id = %(dag_id)s"
        params["dag_id"] = dag_id
    return _select(db, where, params)


def task_rows(db: Db, *, dag_id: str, task_id: str, map_index: int) -> list[dict[str, Any]]:
    """Every row of one task (all its runs): a slot's timeline is among them."""
    return _select(
        db,
        "dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s",
        {"dag_id": dag_id, "task_id": task_id, "map_index": map_index},
    )


def claim_alert(
    db: Db, *, dag_id: str, task_id: str, map_index: int, slot_partition: str, risk: str, summary: str
) -> bool:
    """Record that a slot's risky duplicate is alerted; False when it already was (once per slot)."""
    cursor = db.execute(
        "INSERT INTO crashsafe_audit_alerts (dag_id, task_id, map_index, slot_partition, risk, summary) "
        "VALUES (%(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(risk)s, %(summary)s) "
        "ON CONFLICT (dag_id, task_id, map_index, slot_partition) DO NOTHING",
        {
            "dag_id": dag_id,
            "task_id": task_id,
            "map_index": map_index,
            "slot_partition": slot_partition,
            "risk": risk,
            "summary": summary,
        },
    )
    return int(cursor.rowcount) == 1
