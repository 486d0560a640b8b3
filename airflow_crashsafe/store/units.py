"""Server-side units of work: the table that names them and the lock that says one is in flight.

A crashsafe SQL write on PostgreSQL runs as one statement that completes and commits server-side
even when the Airflow process that sent it is killed (docs/design.md, "Server-side unit and
adoption"). Before it starts, its attempt records the unit here (autocommitted, so every other
attempt can see it); while it runs, the unit holds a transaction-scoped advisory lock derived
from its slot and target; its last act, in the same transaction as the write, marks the row
committed with its result. So:

- lock held → a unit of the slot is in flight (the row says whose);
- lock free, row still ``running`` → that unit ended without committing (rolled back, cancelled,
  or its backend died): its attempt's work is lost and must be redone;
- row ``committed`` → the write and the fence commit are durable.

The table lives in the database that receives the write, beside the fence table.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db

__all__ = [
    "UNIT_TABLE",
    "LockKey",
    "Probe",
    "Unit",
    "cancel_holder",
    "ensure_unit_table",
    "finish_statement",
    "lock_key",
    "mark_failed",
    "probe",
    "record_start",
    "unit_by_id",
]

UNIT_TABLE = "crashsafe_units"
_LOCK_CLASS = 0x63730001  # the first half of every unit lock: "cs" and a version

_DDL = (
    f"""
CREATE TABLE IF NOT EXISTS {UNIT_TABLE} (
    unit_id TEXT PRIMARY KEY,
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL,
    slot_partition TEXT NOT NULL, target TEXT NOT NULL,
    token BIGINT NOT NULL, try_number INTEGER NOT NULL, ti_id TEXT NOT NULL,
    hostname TEXT NOT NULL, pid INTEGER NOT NULL, backend_pid INTEGER NOT NULL,
    clear_number INTEGER NOT NULL,
    state TEXT NOT NULL, result JSONB, error TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), finished_at TIMESTAMPTZ
)""",
    f"""CREATE INDEX IF NOT EXISTS {UNIT_TABLE}_slot
    ON {UNIT_TABLE} (dag_id, task_id, map_index, slot_partition, target, started_at)""",
)

_SLOT_MATCH = (
    "dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s"
    " AND slot_partition = %(slot_partition)s AND target = %(target)s"
)
_COLUMNS = (
    "unit_id, token, try_number, ti_id, hostname, pid, backend_pid, clear_number, state, result, "
    "error, started_at, finished_at"
)

_RECORD = f"""
INSERT INTO {UNIT_TABLE} (unit_id, dag_id, task_id, map_index, slot_partition, target, token,
    try_number, ti_id, hostname, pid, backend_pid, clear_number, state)
VALUES (%(unit_id)s, %(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(target)s,
    %(token)s, %(try_number)s, %(ti_id)s, %(hostname)s, %(pid)s, pg_backend_pid(),
    %(clear_number)s, 'running')"""

# One round trip: try the slot's lock (released again at once: autocommit) and, when it is held,
# read the newest unit still marked running, i.e. the one holding it.
_IN_FLIGHT = f"""
SELECT l.free, u.* FROM (SELECT pg_try_advisory_xact_lock(%(k1)s, %(k2)s) AS free{{keep}}) AS l
LEFT JOIN LATERAL (
    SELECT {_COLUMNS} FROM {UNIT_TABLE}
    WHERE {_SLOT_MATCH} AND state = 'running' ORDER BY started_at DESC LIMIT 1
) AS u ON NOT l.free"""

# Run by the unit itself as its last act, with its result (JSON text) as $1.
_FINISH = f"""
UPDATE {UNIT_TABLE} SET state = 'committed', result = $1::jsonb, finished_at = clock_timestamp()
WHERE unit_id = %(unit_id)s"""

_BY_ID = f"SELECT {_COLUMNS} FROM {UNIT_TABLE} WHERE unit_id = %(unit_id)s"

# pg_locks shows who holds an advisory lock to every role; objid is the key's unsigned form. Only
# a backend running one of this slot's units is cancelled: a colliding key must not hit another.
_CANCEL = f"""
SELECT l.pid, pg_cancel_backend(l.pid) FROM pg_locks AS l
JOIN {UNIT_TABLE} AS u ON u.backend_pid = l.pid AND u.state = 'running'
WHERE l.locktype = 'advisory'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = %(k1u)s AND l.objid = %(k2u)s AND l.objsubid = 2 AND l.granted
  AND u.dag_id = %(dag_id)s AND u.task_id = %(task_id)s AND u.map_index = %(map_index)s
  AND u.slot_partition = %(slot_partition)s AND u.target = %(target)s"""

_FAILED = f"""
UPDATE {UNIT_TABLE} SET state = 'failed', error = %(error)s, finished_at = clock_timestamp()
WHERE unit_id = %(unit_id)s AND state = 'running'"""


@dataclass(frozen=True)
class LockKey:
    """The two int4 halves of a slot's advisory lock (``pg_advisory_xact_lock(k1, k2)``)."""

    k1: int
    k2: int

    def params(self) -> dict[str, int]:
        return {"k1": self.k1, "k2": self.k2, "k1u": self.k1 & 0xFFFFFFFF, "k2u": self.k2 & 0xFFFFFFFF}

    def sql(self) -> str:
        return f"pg_advisory_xact_lock({self.k1}, {self.k2})"


def lock_key(slot: Slot, target: str) -> LockKey:
    """A stable lock key per (slot, target); a collision only makes one unit wait for another."""
    text = "\x1f".join((slot.dag_id, slot.task_id, str(slot.map_index), slot.partition, target))
    k2 = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big", signed=True)
    return LockKey(_LOCK_CLASS, k2)


@dataclass(frozen=True)
class Unit:
    """One server-side unit of work as recorded."""

    unit_id: str
    token: int
    try_number: int
    ti_id: str
    hostname: str
    pid: int
    backend_pid: int
    clear_number: int
    state: str  # running | committed | failed
    result: dict[str, Any]
    error: str | None
    started_at: Any
    finished_at: Any

    def describe(self) -> str:
        return f"try {self.try_number} (ti {self.ti_id}, {self.hostname} pid {self.pid})"

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for trigger kwargs and XCom."""
        return {
            "unit_id": self.unit_id,
            "token": self.token,
            "try_number": self.try_number,
            "ti_id": self.ti_id,
            "hostname": self.hostname,
            "pid": self.pid,
            "backend_pid": self.backend_pid,
            "started_at": str(self.started_at),
        }


def _unit(row: Any) -> Unit:
    result = row[9]
    if isinstance(result, str):
        result = json.loads(result)
    return Unit(
        unit_id=str(row[0]),
        token=int(row[1]),
        try_number=int(row[2]),
        ti_id=str(row[3]),
        hostname=str(row[4]),
        pid=int(row[5]),
        backend_pid=int(row[6]),
        clear_number=int(row[7]),
        state=str(row[8]),
        result=dict(result or {}),
        error=row[10],
        started_at=row[11],
        finished_at=row[12],
    )


def ensure_unit_table(db: Db) -> None:
    """Create the unit table if needed (PostgreSQL only: units exist only there)."""
    fences.create_tables(db, _DDL)


def record_start(db: Db, slot: Slot, target: str, attempt: Attempt, token: int) -> str:
    """Record, autocommitted, that this attempt's unit is about to start; returns its id."""
    unit_id = str(uuid.uuid4())
    params = fences.slot_params(slot, target) | {
        "unit_id": unit_id,
        "token": token,
        "try_number": attempt.try_number,
        "ti_id": attempt.ti_id,
        "hostname": attempt.hostname,
        "pid": attempt.pid,
        "clear_number": attempt.clear_number,
    }
    try:
        db.execute_alone(_RECORD, params)
    except Exception as exc:
        if not fences.is_missing_table(exc):
            raise
        ensure_unit_table(db)
        db.execute_alone(_RECORD, params)
    return unit_id


# A unit must outlive its sender: a server that checks for vanished clients
# (client_connection_check_interval, PostgreSQL 14+) would abort it. Set once per connection,
# folded into the probe so that it costs no round trip of its own.
_KEEP_RUNNING = ", set_config('client_connection_check_interval', '0', false)"


@dataclass(frozen=True)
class Probe:
    """Whether (slot, target)'s lock is free, and when it is held, by whose running unit."""

    free: bool
    unit: Unit | None  # None when free, or held by a unit whose row we cannot see


def probe(db: Db, slot: Slot, target: str, *, keep_running: bool = False) -> Probe:
    """One round trip: is a unit of (slot, target) running server-side right now, and whose?

    ``keep_running`` also makes this connection's future statements survive their client's
    death (``client_connection_check_interval = 0``; PostgreSQL 14+ only).
    """
    params = fences.slot_params(slot, target) | lock_key(slot, target).params()
    sql = _IN_FLIGHT.replace("{keep}", _KEEP_RUNNING if keep_running else "")
    try:
        row = db.execute_alone(sql, params).fetchone()
    except Exception as exc:
        if not fences.is_missing_table(exc):
            raise
        # No unit ever ran in this database: nothing can be in flight.
        if keep_running:
            db.execute_alone(f"SELECT 1{_KEEP_RUNNING}")
        return Probe(free=True, unit=None)
    if row is None or row[0]:
        return Probe(free=True, unit=None)
    # Held. Without a running row it is a colliding key's unit (or one committing right now).
    return Probe(free=False, unit=None if row[1] is None else _unit(row[1:]))


def finish_statement(unit_id: str) -> tuple[str, dict[str, Any]]:
    """The statement a unit ends with, marking itself committed with its result (``$1``)."""
    return _FINISH, {"unit_id": unit_id}


def unit_by_id(db: Db, unit_id: str) -> Unit | None:
    with db.autocommit():
        row = db.execute(_BY_ID, {"unit_id": unit_id}).fetchone()
    return _unit(row) if row is not None else None


def cancel_holder(db: Db, slot: Slot, target: str) -> list[int]:
    """Cancel the statement of whichever backend holds (slot, target)'s lock; their pids."""
    with db.autocommit():
        try:
            rows = db.execute(
                _CANCEL, fences.slot_params(slot, target) | lock_key(slot, target).params()
            ).fetchall()
        except Exception as exc:
            if fences.is_missing_table(exc):
                return []
            raise
    return [int(pid) for pid, _ok in rows]


def mark_failed(db: Db, unit_id: str, error: str) -> None:
    """Say why a unit ended without committing (best effort: its backend may be gone)."""
    db.execute_alone(_FAILED, {"unit_id": unit_id, "error": error[:2000]})
