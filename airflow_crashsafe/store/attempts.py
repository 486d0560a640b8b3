"""The ``crashsafe_attempts`` table: one row per execution of a slot (the audit's raw record).

An execution is a try run by one process (``hostname``, ``pid``); a row whose process is not known
yet (``''`` / ``0``, from history or the scheduler) is a placeholder for its try. Every record is
merged into its execution's row by :func:`merge_rows`, a commutative, idempotent merge, so start,
end, beacon and reconcile records converge whatever order they arrive in (a spooled start
delivered after its end, a reconcile racing the worker) and a re-delivered record changes
nothing. Precedence: the task process's own start and end beat the scheduler's, which beat what
reconciliation read from Airflow's history. An end the process did not report itself is Airflow's
estimate (a reset try's is the archive time), so it never lies before the process's own last sign
of life. Every write also marks its task instance for the duplicate digest
(:mod:`airflow_crashsafe.store.dirty`) in the same transaction. See docs/design.md, "Audit".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol

from airflow_crashsafe.store import dirty
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.store.values import in_list, stamps_from_db, to_db

__all__ = [
    "FIELDS",
    "KEY",
    "AttemptLog",
    "AttemptRow",
    "Recordable",
    "merge_rows",
    "open_attempts",
    "partition_rows",
    "record",
    "rows_of_runs",
    "slot_partition_of",
    "slot_rows",
    "task_instance_rows",
    "task_rows",
    "touch",
]

#: An execution's primary key.
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
    "resumed",
)
FIELDS = KEY + VALUES + ("updated_at",)
_STAMPS = ("started_at", "ended_at", "last_seen_at", "updated_at", "terminated_at")
_RANK = {None: 0, "reconcile": 1, "scheduler": 2, "listener": 3}
_TRY = (
    "dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s"
    " AND run_id = %(run_id)s AND try_number = %(try_number)s"
)

#: A row (or part of one) by column name; times are aware UTC datetimes.
AttemptRow = dict[str, Any]


class Recordable(Protocol):
    """What the table records: one source's view of one execution, as a (partial) row.

    The row names the execution (:data:`KEY`; ``''`` / ``0`` for an unknown process), its values,
    and ``start_source`` / ``end_source`` / ``state_source`` beside the values that source saw.
    :class:`~airflow_crashsafe.audit.events.AttemptEvent` is one.
    """

    def as_row(self) -> AttemptRow: ...


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


def merge_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> AttemptRow:
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
    resumed = [v for v in (a.get("resumed"), b.get("resumed")) if v is not None]
    out["resumed"] = any(bool(v) for v in resumed) if resumed else None
    if out["end_source"] not in (None, "listener"):
        out["ended_at"] = _max(out["ended_at"], out["last_seen_at"])
    return out


def _from_db(values: Sequence[Any]) -> AttemptRow:
    row = stamps_from_db(dict(zip(FIELDS, values, strict=True)), _STAMPS)
    for flag in ("replay_safe", "resumed"):
        if row[flag] is not None:
            row[flag] = bool(row[flag])
    return row


def _select(db: Db, where: str, params: Mapping[str, Any], *, lock: bool = False) -> list[AttemptRow]:
    sql = f"SELECT {', '.join(FIELDS)} FROM crashsafe_attempts WHERE {where}"
    if lock and db.dialect.is_postgres:
        sql += " FOR UPDATE"
    return [_from_db(r) for r in db.execute(sql, params).fetchall()]


def _write(db: Db, row: Mapping[str, Any], *, insert: bool) -> None:
    params = {k: to_db(db, row.get(k)) for k in KEY + VALUES}
    params["now"] = to_db(db, datetime.now(timezone.utc))
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


def record(db: Db, event: Recordable) -> None:
    """Merge one record into its row(s), inside the caller's transaction.

    A record that names its process lands on that process's row (absorbing a placeholder row of
    the same try); one that does not (a history row without pid) lands on every row of its try,
    or on a placeholder row when none exists yet.
    """
    if db.dialect.is_postgres:
        # Audit rows are best effort and re-deliverable: do not wait for the WAL flush (~ms).
        db.execute("SET LOCAL synchronous_commit TO OFF")
    incoming = event.as_row()
    key = {k: incoming[k] for k in ("dag_id", "task_id", "map_index", "run_id", "try_number")}
    dirty.mark(db, key)
    known = bool(incoming["hostname"]) and bool(incoming["pid"])
    blank = {**incoming, **dict.fromkeys(VALUES), "slot_partition": ""}
    if known:
        _write(db, blank, insert=True)
    rows = _select(db, _TRY, key, lock=True)
    if not known and not rows:
        _write(db, blank, insert=True)
        rows = _select(db, _TRY, key, lock=True)
    if known:
        mine = [r for r in rows if r["hostname"] == incoming["hostname"] and r["pid"] == incoming["pid"]]
        placeholders = [r for r in rows if not r["hostname"] and not r["pid"]]
        merged = merge_rows(mine[0], incoming)
        for placeholder in placeholders:
            merged = merge_rows(merged, placeholder)
            db.execute(f"DELETE FROM crashsafe_attempts WHERE {_TRY} AND hostname = '' AND pid = 0", key)
        _write(db, merged, insert=False)
        return
    for row in rows:
        _write(db, merge_rows(row, incoming), insert=False)


_TOUCH = """UPDATE crashsafe_attempts SET
    last_seen_at = CASE WHEN last_seen_at IS NULL OR last_seen_at < %(at)s THEN %(at)s ELSE last_seen_at END,
    ended_at = CASE WHEN end_source IN ('scheduler', 'reconcile') AND ended_at < %(at)s THEN %(at)s
        ELSE ended_at END,
    updated_at = %(now)s
WHERE dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s AND run_id = %(run_id)s
    AND try_number = %(try_number)s AND hostname = %(hostname)s AND pid = %(pid)s"""


def touch(db: Db, beacons: Iterable[Recordable]) -> int:
    """Liveness beacons: raise ``last_seen_at`` of existing rows, one UPDATE each (as merge_rows would).

    A beacon for a row not stored yet (its start still spooled) changes nothing: the start carries
    its own sign of life. Returns how many rows were touched.
    """
    touched = 0
    now = to_db(db, datetime.now(timezone.utc))
    for beacon in beacons:
        row = beacon.as_row()
        assert row["last_seen_at"] is not None
        params = {k: row[k] for k in KEY}
        cursor = db.execute(_TOUCH, {**params, "at": to_db(db, row["last_seen_at"]), "now": now})
        if int(cursor.rowcount) > 0:
            touched += 1
            dirty.mark(db, params)
    return touched


def open_attempts(db: Db, *, started_before: datetime) -> list[AttemptRow]:
    """Executions with no recorded end that started before ``started_before`` (to reconcile)."""
    return _select(
        db,
        "ended_at IS NULL AND started_at IS NOT NULL AND started_at < %(before)s",
        {"before": to_db(db, started_before)},
    )


def slot_rows(db: Db, *, since: datetime, dag_id: str | None = None) -> list[AttemptRow]:
    """Every row of every slot (or run) that had any activity since ``since``."""
    where = (
        "EXISTS (SELECT 1 FROM crashsafe_attempts b WHERE b.dag_id = crashsafe_attempts.dag_id"
        " AND b.task_id = crashsafe_attempts.task_id AND b.map_index = crashsafe_attempts.map_index"
        " AND (b.slot_partition = crashsafe_attempts.slot_partition OR b.run_id = crashsafe_attempts.run_id)"
        " AND b.updated_at >= %(since)s)"
    )
    params: dict[str, Any] = {"since": to_db(db, since)}
    if dag_id is not None:
        where += " AND dag_id = %(dag_id)s"
        params["dag_id"] = dag_id
    return _select(db, where, params)


_TASK = "dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s"


def task_rows(db: Db, *, dag_id: str, task_id: str, map_index: int) -> list[AttemptRow]:
    """Every row of one task (all its runs): a slot's timeline is among them."""
    return _select(db, _TASK, {"dag_id": dag_id, "task_id": task_id, "map_index": map_index})


def slot_partition_of(db: Db, *, dag_id: str, task_id: str, map_index: int, run_id: str) -> str:
    """The partition of the slot a run of one task belongs to (the run id when none is recorded)."""
    params = {"dag_id": dag_id, "task_id": task_id, "map_index": map_index, "run_id": run_id}
    found = db.execute(
        f"SELECT slot_partition FROM crashsafe_attempts WHERE {_TASK} AND run_id = %(run_id)s"
        " AND slot_partition <> '' LIMIT 1",
        params,
    ).fetchone()
    return str(found[0]) if found else run_id


def partition_rows(db: Db, *, dag_id: str, task_id: str, map_index: int, partition: str) -> list[AttemptRow]:
    """Every row of the runs of one task that belong to slot ``partition`` (placeholders too),
    plus those of a run whose id is ``partition`` (a run without a logical date): one slot's
    timeline, read through the slot index and the primary key, whatever other runs the task has."""
    params = {"dag_id": dag_id, "task_id": task_id, "map_index": map_index, "p": partition}
    where = (  # IN (... UNION ...), not an OR: both planners then seek the primary key per run
        f"{_TASK} AND run_id IN (SELECT run_id FROM crashsafe_attempts"
        f" WHERE {_TASK} AND slot_partition = %(p)s UNION SELECT %(p)s)"
    )
    return _select(db, where, params)


def task_instance_rows(db: Db, *, dag_id: str, task_id: str, map_index: int, run_id: str) -> list[AttemptRow]:
    """Every row of one task instance (all its tries and processes)."""
    params = {"dag_id": dag_id, "task_id": task_id, "map_index": map_index, "run_id": run_id}
    return _select(db, f"{_TASK} AND run_id = %(run_id)s", params)


def rows_of_runs(
    db: Db, *, dag_id: str, task_id: str, map_index: int, run_ids: Sequence[str]
) -> list[AttemptRow]:
    """Every row of the slots these runs of one task belong to (their partitions' other runs too)."""
    runs, params = in_list("r", run_ids)
    params.update({"dag_id": dag_id, "task_id": task_id, "map_index": map_index})
    where = (
        f"{_TASK} AND (run_id IN ({runs}) OR slot_partition IN (SELECT slot_partition FROM"
        f" crashsafe_attempts WHERE {_TASK} AND run_id IN ({runs}) AND slot_partition <> ''))"
    )
    return _select(db, where, params)


class AttemptLog:
    """The audit writer's store side: each record, or batch of beacons, in its own transaction.

    Satisfies :class:`~airflow_crashsafe.audit.writer.AuditSink`; both writes raise on failure
    (the writer then spools the record and calls :meth:`discard_connection`).
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def apply(self, event: Recordable) -> None:
        """Store one record (see :func:`record`)."""
        with self.store.transaction() as db:
            record(db, event)

    def touch(self, beacons: Sequence[Recordable]) -> int:
        """Store liveness beacons of running attempts (see :func:`touch`)."""
        with self.store.transaction() as db:
            return touch(db, beacons)

    def discard_connection(self) -> None:
        """Drop this thread's connection after a failure: the next write opens a fresh one."""
        self.store.discard_connection()

    def release(self) -> None:
        """The writer's thread is ending: close its connection."""
        self.store.discard_connection()
