"""The ``crashsafe_admission`` table: recovery re-runs waiting for, and holding, a place per resource.

One row per re-run that asked for a place (docs/design.md, "Recovery admission"): ``waiting`` until
admitted, then ``admitted`` until released (deleted). A row counts only while it is **live**: its
holder refreshed ``beacon_at`` within its own ``lease_seconds``. Times are seconds since the epoch
on the store's clock (never a worker's), so holders on hosts with skewed clocks are judged alike.

Admission is one statement (:func:`try_admit`) under a per-resource lock (an advisory transaction
lock on PostgreSQL, the single write lock on SQLite): a waiting row becomes ``admitted`` only if the
live admitted rows plus the live waiters ranked ahead of it are fewer than ``k``. The rank is
(deadline, most downstream tasks first, arrival), so a free place goes to the most urgent waiter,
not to whichever polls first.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.store.dbapi import Db

__all__ = [
    "ADMISSION_TABLE",
    "NO_DEADLINE",
    "WAITED_EVENT",
    "Request",
    "beacon",
    "claim",
    "ddl",
    "enqueue",
    "exists",
    "hand_off",
    "live_holders",
    "reap_dead_local",
    "release",
    "requeue",
    "rows",
    "try_admit",
]

ADMISSION_TABLE = "crashsafe_admission"
#: ``deadline_at`` of a re-run without a deadline: ranked after every re-run that has one.
NO_DEADLINE = 1e15
#: The event kind recorded (``crashsafe_events``) when a re-run was admitted after waiting.
WAITED_EVENT = "admission_waited"

_NOW = {
    "postgresql": "extract(epoch from clock_timestamp())::double precision",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}
_LIVE = "{a}.beacon_at + {a}.lease_seconds >= {now}"
# w is ahead of crashsafe_admission (the row being admitted) in the admission order.
_AHEAD = (
    "(w.deadline_at < crashsafe_admission.deadline_at OR (w.deadline_at = crashsafe_admission.deadline_at"
    " AND (w.downstream > crashsafe_admission.downstream OR (w.downstream = crashsafe_admission.downstream"
    " AND w.id < crashsafe_admission.id))))"
)


def _now(db: Db) -> str:
    return _NOW[db.dialect.name]


def ddl(dialect: str) -> tuple[str, ...]:
    """The table and its index, for the schema's migration."""
    ident = "BIGSERIAL PRIMARY KEY" if dialect == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    real = "DOUBLE PRECISION" if dialect == "postgresql" else "REAL"
    return (
        f"""CREATE TABLE {ADMISSION_TABLE} (
    id {ident}, resource TEXT NOT NULL, state TEXT NOT NULL,
    deadline_at {real} NOT NULL, downstream INTEGER NOT NULL,
    hostname TEXT NOT NULL, pid INTEGER NOT NULL, lease_seconds {real} NOT NULL,
    arrived_at {real} NOT NULL, beacon_at {real} NOT NULL, admitted_at {real},
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL,
    run_id TEXT NOT NULL, try_number INTEGER NOT NULL)""",
        f"CREATE INDEX crashsafe_admission_resource ON {ADMISSION_TABLE} (resource, state)",
    )


@dataclass(frozen=True)
class Request:
    """Who asks for a place of ``resource``, and how urgent it is."""

    resource: str
    deadline_at: float  # seconds since the epoch; NO_DEADLINE for none
    downstream: int
    lease_seconds: float
    dag_id: str
    task_id: str
    map_index: int
    run_id: str
    try_number: int


def _lock(db: Db, resource: str) -> None:
    """Serialize admissions of one resource (PostgreSQL; SQLite's write lock already does)."""
    if db.dialect.is_postgres:
        digest = hashlib.blake2b(f"crashsafe_admission:{resource}".encode(), digest_size=8).digest()
        # The one-bigint key space never overlaps the two-int keys that units lock.
        db.execute(
            "SELECT pg_advisory_xact_lock(%(key)s)", {"key": int.from_bytes(digest, "big", signed=True)}
        )


def enqueue(db: Db, request: Request, *, hostname: str, pid: int) -> int:
    """Add a live waiting row (inside the caller's transaction) and return its id."""
    params = {**request.__dict__, "hostname": hostname, "pid": pid}
    cursor = db.execute(
        f"INSERT INTO {ADMISSION_TABLE} (resource, state, deadline_at, downstream, hostname, pid,"
        " lease_seconds, arrived_at, beacon_at, dag_id, task_id, map_index, run_id, try_number)"
        " VALUES (%(resource)s, 'waiting', %(deadline_at)s, %(downstream)s, %(hostname)s, %(pid)s,"
        f" %(lease_seconds)s, {_now(db)}, {_now(db)}, %(dag_id)s, %(task_id)s, %(map_index)s,"
        " %(run_id)s, %(try_number)s) RETURNING id",
        params,
    )
    return int(cursor.fetchone()[0])


def try_admit(db: Db, holder: int, resource: str, k: int, *, hostname: str, pid: int) -> int | None:
    """Admit waiting row ``holder`` if a place is free for it; its place (1..k), else None.

    Runs in the caller's transaction: takes the resource's lock, refreshes the waiter's beacon, then
    one UPDATE admits it only if fewer than ``k`` live rows are admitted or waiting ahead of it.
    ``hostname`` / ``pid`` name who holds the place from now (pid 0: only the beacon proves life).
    """
    _lock(db, resource)
    now = _now(db)
    live_w = _LIVE.format(a="w", now=now)
    cursor = db.execute(
        f"UPDATE {ADMISSION_TABLE} SET state = 'admitted', admitted_at = {now}, beacon_at = {now},"
        " hostname = %(hostname)s, pid = %(pid)s"
        " WHERE id = %(id)s AND state = 'waiting' AND (SELECT count(*) FROM crashsafe_admission w"
        f" WHERE w.resource = crashsafe_admission.resource AND w.id <> crashsafe_admission.id AND {live_w}"
        f" AND (w.state = 'admitted' OR {_AHEAD})) < %(k)s",
        {"id": holder, "k": k, "hostname": hostname, "pid": pid},
    )
    if int(cursor.rowcount) == 0:
        db.execute(f"UPDATE {ADMISSION_TABLE} SET beacon_at = {now} WHERE id = %(id)s", {"id": holder})
        return None
    return live_holders(db, resource)


def live_holders(db: Db, resource: str) -> int:
    """How many live rows of ``resource`` are admitted now."""
    live = _LIVE.format(a="a", now=_now(db))
    row = db.execute(
        f"SELECT count(*) FROM {ADMISSION_TABLE} a"
        f" WHERE a.resource = %(r)s AND a.state = 'admitted' AND {live}",
        {"r": resource},
    ).fetchone()
    return int(row[0])


def exists(db: Db, holder: int) -> bool:
    """Whether row ``holder`` is still there (a stale one may have been reaped)."""
    return (
        db.execute(f"SELECT 1 FROM {ADMISSION_TABLE} WHERE id = %(id)s", {"id": holder}).fetchone()
        is not None
    )


def reap_dead_local(db: Db, hostname: str, alive: Callable[[int], bool]) -> int:
    """Delete rows held by processes of ``hostname`` that are gone (and long-dead rows of any host).

    Only this host's pids are checked: a pid means nothing on another machine, whose holders are
    judged by their beacon alone.
    """
    rows = db.execute(
        f"SELECT id, pid FROM {ADMISSION_TABLE} WHERE hostname = %(h)s AND pid > 0", {"h": hostname}
    ).fetchall()
    dead = [int(row[0]) for row in rows if int(row[1]) != os.getpid() and not alive(int(row[1]))]
    for holder in dead:
        db.execute(f"DELETE FROM {ADMISSION_TABLE} WHERE id = %(id)s", {"id": holder})
    # Rows long past their lease (holders that died on other hosts) no longer count: drop them.
    db.execute(f"DELETE FROM {ADMISSION_TABLE} WHERE beacon_at + 10 * lease_seconds < {_now(db)}")
    return len(dead)


def beacon(db: Db, holder: int) -> bool:
    """Refresh a holder's sign of life; False when its row is gone."""
    cursor = db.execute(
        f"UPDATE {ADMISSION_TABLE} SET beacon_at = {_now(db)} WHERE id = %(id)s", {"id": holder}
    )
    return int(cursor.rowcount) > 0


def hand_off(db: Db, holder: int) -> None:
    """The holder's process is leaving (deferral): from now only the beacon proves the row alive."""
    db.execute(
        f"UPDATE {ADMISSION_TABLE} SET pid = 0, beacon_at = {_now(db)} WHERE id = %(id)s", {"id": holder}
    )


def claim(db: Db, holder: int, *, hostname: str, pid: int) -> bool:
    """Take over a place admitted for this re-run while it was deferred; False if it went stale."""
    live = _LIVE.format(a=ADMISSION_TABLE, now=_now(db))
    cursor = db.execute(
        f"UPDATE {ADMISSION_TABLE} SET hostname = %(h)s, pid = %(p)s, beacon_at = {_now(db)}"
        f" WHERE id = %(id)s AND state = 'admitted' AND {live}",
        {"id": holder, "h": hostname, "p": pid},
    )
    return int(cursor.rowcount) > 0


def requeue(db: Db, holder: int, *, hostname: str, pid: int) -> bool:
    """Make row ``holder`` wait again, keeping its rank; False when it is gone."""
    cursor = db.execute(
        f"UPDATE {ADMISSION_TABLE} SET state = 'waiting', admitted_at = NULL, hostname = %(h)s,"
        f" pid = %(p)s, beacon_at = {_now(db)} WHERE id = %(id)s",
        {"id": holder, "h": hostname, "p": pid},
    )
    return int(cursor.rowcount) > 0


def release(db: Db, holder: int) -> None:
    """Give the place (or the wait) up."""
    db.execute(f"DELETE FROM {ADMISSION_TABLE} WHERE id = %(id)s", {"id": holder})


def rows(db: Db, resource: str) -> list[Mapping[str, Any]]:
    """Every row of ``resource`` with whether it is live (for tests and the audit)."""
    live = _LIVE.format(a="a", now=_now(db))
    cursor = db.execute(
        f"SELECT id, state, hostname, pid, deadline_at, downstream, arrived_at, admitted_at,"
        f" CASE WHEN {live} THEN 1 ELSE 0 END FROM {ADMISSION_TABLE} a WHERE a.resource = %(r)s ORDER BY id",
        {"r": resource},
    )
    names = (
        "id",
        "state",
        "hostname",
        "pid",
        "deadline_at",
        "downstream",
        "arrived_at",
        "admitted_at",
        "live",
    )
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
