"""What PostgreSQL shows about the metadata DB's sessions: the wedge's SQL, and nothing else.

Read from ``pg_stat_activity`` joined to ``pg_locks`` in the metadata database, and the ``job``
table's scheduler rows. Airflow's tables are found by oid in the metadata schema — the schema of
the ``job`` table this connection reads (``to_regclass('job')`` on its search path) — so a table
of another schema that only shares a name (``app.job``, ``job.slot_pool``) is never looked at.
No query text is read: what a session locks is named by table and lock mode. Each function takes
an open psycopg (3) connection in autocommit, as :class:`~airflow_crashsafe.watchdog.db.DbSource`
opens it. See :mod:`airflow_crashsafe.watchdog.wedge` for what the rows mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_crashsafe.watchdog.health import JobRecord, parse_timestamp

__all__ = [
    "IDLE_STATES",
    "SCHEDULER_TABLES",
    "Relation",
    "hidden_sessions",
    "idle_lock_holders",
    "metadata_tables",
    "scheduler_jobs",
    "session_names",
    "terminate",
]

#: The tables the scheduler's loop locks rows of (its critical section starts with ``slot_pool``).
SCHEDULER_TABLES = (
    "slot_pool",
    "task_instance",
    "dag_run",
    "dag",
    "job",
    "trigger",
    "backfill",
    "asset_dag_run_queue",
)
IDLE_STATES = ("idle in transaction", "idle in transaction (aborted)")

_METADATA_TABLES = """
SELECT c.oid::bigint, n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('job'))
  AND c.relname = ANY(%(tables)s) AND c.relkind IN ('r', 'p')
"""
# AccessShareLock is what any plain SELECT takes: it blocks nothing the scheduler does, so a
# reader idle in a transaction is not a wedge. Row locks (FOR UPDATE/SHARE, writes) show up as
# RowShareLock or stronger on the table.
_HOLDERS = """
SELECT a.pid, a.state, a.backend_start, a.xact_start, a.state_change, now(), a.usename,
       a.application_name, host(a.client_addr), a.client_port,
       array_agg(l.relation::bigint ORDER BY l.relation, l.mode),
       array_agg(l.mode ORDER BY l.relation, l.mode)
FROM pg_stat_activity a
JOIN pg_locks l ON l.pid = a.pid AND l.granted AND l.locktype = 'relation'
     AND l.mode <> 'AccessShareLock' AND l.relation::bigint = ANY(%(oids)s)
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.state = ANY(%(states)s)
  AND a.state_change <= now() - make_interval(secs => %(idle)s)
GROUP BY a.pid, a.state, a.backend_start, a.xact_start, a.state_change, a.usename,
         a.application_name, a.client_addr, a.client_port
ORDER BY a.xact_start
LIMIT 20
"""
_HIDDEN = (
    "SELECT count(*), current_user, current_database() FROM pg_stat_activity "
    "WHERE datname = current_database() AND backend_type IS NULL"  # what another role's session shows
)
# application_name is shown for every role's sessions, also without pg_read_all_stats.
_SESSION_NAMES = (
    "SELECT COALESCE(application_name, ''), count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 2 DESC, 1"
)
_SCHEDULER_JOBS = (
    "SELECT id, state, latest_heartbeat, hostname, start_date FROM job "
    "WHERE job_type = 'SchedulerJob' AND (state = 'running' OR latest_heartbeat >= %s OR id = ANY(%s)) "
    "ORDER BY latest_heartbeat DESC LIMIT 100"
)
# Re-checks, in the statement that signals, that the session is still the one judged orphaned:
# the same backend, the same transaction, idle since the same moment, the same application name,
# still holding a lock on one of Airflow's tables.
_TERMINATE = """
SELECT pg_terminate_backend(a.pid{wait})
FROM pg_stat_activity a
WHERE a.pid = %(pid)s AND a.backend_start = %(backend_start)s AND a.xact_start = %(xact_start)s
  AND a.state_change = %(idle_since)s AND a.state = ANY(%(states)s)
  AND a.application_name IS NOT DISTINCT FROM %(application)s
  AND EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.pid = a.pid AND l.granted AND l.locktype = 'relation' AND l.mode <> 'AccessShareLock'
      AND l.relation::bigint = ANY(%(oids)s))
"""


@dataclass(frozen=True)
class Relation:
    """A table as PostgreSQL names it: its oid (what is compared), schema and name (what is shown)."""

    oid: int
    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


def _fetch(conn: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def metadata_tables(conn: Any) -> dict[int, Relation]:
    """Airflow's scheduler tables by oid, in the schema of the ``job`` table this connection reads.

    Empty when no ``job`` table is on the connection's search path.
    """
    rows = _fetch(conn, _METADATA_TABLES, {"tables": list(SCHEDULER_TABLES)})
    return {int(oid): Relation(int(oid), str(schema), str(name)) for oid, schema, name in rows}


def idle_lock_holders(conn: Any, idle_seconds: float, oids: Sequence[int]) -> list[tuple[Any, ...]]:
    """Sessions idle in a transaction for ``idle_seconds`` or more holding row locks on ``oids``.

    Each row: pid, state, backend_start, xact_start, state_change, now(), user, application,
    client address, client port, the locked relations' oids and, in the same order, the modes.
    """
    if not oids:
        return []
    params = {"states": list(IDLE_STATES), "oids": [int(o) for o in oids], "idle": float(idle_seconds)}
    return _fetch(conn, _HOLDERS, params)


def hidden_sessions(conn: Any) -> tuple[int, str, str]:
    """How many client sessions' state this role cannot see, the role's name and the database's."""
    count, user, database = _fetch(conn, _HIDDEN)[0]
    return int(count), str(user), str(database)


def session_names(conn: Any) -> dict[str, int]:
    """How many sessions of this database (other than this one) carry each ``application_name``."""
    return {str(name): int(count) for name, count in _fetch(conn, _SESSION_NAMES)}


def scheduler_jobs(conn: Any, since: datetime, ids: Sequence[int] = ()) -> list[JobRecord]:
    """Scheduler ``job`` rows running, heartbeating at ``since`` or later, or among ``ids``."""
    return [
        JobRecord(
            "scheduler",
            parse_timestamp(beat),
            state=state,
            job_id=int(job_id),
            hostname=hostname,
            start_date=parse_timestamp(started),
        )
        for job_id, state, beat, hostname, started in _fetch(
            conn, _SCHEDULER_JOBS, (since, [int(i) for i in ids])
        )
    ]


def terminate(
    conn: Any, key: Sequence[Any], wait_ms: int, *, application: str | None, oids: Sequence[int]
) -> bool | None:
    """``pg_terminate_backend`` the session ``key`` = (pid, backend_start, xact_start, idle_since).

    Only while it still carries ``application`` and holds a row lock on one of ``oids``. Returns
    None when that session is no longer the one judged (gone, or it moved on), else what
    PostgreSQL answered (False: signalled, still there after ``wait_ms``). Raises the driver's
    error when this role may not terminate it.
    """
    pid, backend_start, xact_start, idle_since = key
    wait = f", {int(wait_ms)}" if wait_ms > 0 and conn.info.server_version >= 140000 else ""
    params = {
        "pid": pid,
        "backend_start": backend_start,
        "xact_start": xact_start,
        "idle_since": idle_since,
        "states": list(IDLE_STATES),
        "application": application,
        "oids": [int(o) for o in oids],
    }
    rows = _fetch(conn, _TERMINATE.format(wait=wait), params)
    return bool(rows[0][0]) if rows else None
