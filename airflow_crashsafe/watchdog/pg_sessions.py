"""What PostgreSQL shows about the metadata DB's sessions: the wedge's SQL, and nothing else.

Read from ``pg_stat_activity`` joined to ``pg_locks`` and ``pg_class`` in the metadata database,
and the ``job`` table's scheduler rows. Each function takes an open psycopg (3) connection in
autocommit, as :class:`~airflow_crashsafe.watchdog.db.DbSource` opens it. See
:mod:`airflow_crashsafe.watchdog.wedge` for what the rows mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from airflow_crashsafe.watchdog.health import JobRecord, parse_timestamp

__all__ = [
    "IDLE_STATES",
    "SCHEDULER_TABLES",
    "hidden_sessions",
    "idle_lock_holders",
    "scheduler_jobs",
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

# AccessShareLock is what any plain SELECT takes: it blocks nothing the scheduler does, so a
# reader idle in a transaction is not a wedge. Row locks (FOR UPDATE/SHARE, writes) show up as
# RowShareLock or stronger on the table.
_HOLDERS = """
SELECT a.pid, a.state, a.backend_start, a.xact_start, a.state_change, now(), a.usename,
       a.application_name, host(a.client_addr), a.client_port, left(a.query, 300),
       array_agg(DISTINCT c.relname || ' ' || l.mode ORDER BY c.relname || ' ' || l.mode)
FROM pg_stat_activity a
JOIN pg_locks l ON l.pid = a.pid AND l.granted AND l.locktype = 'relation'
     AND l.mode <> 'AccessShareLock'
JOIN pg_class c ON c.oid = l.relation
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND a.state = ANY(%(states)s) AND c.relname = ANY(%(tables)s)
  AND a.state_change <= now() - make_interval(secs => %(idle)s)
GROUP BY a.pid, a.state, a.backend_start, a.xact_start, a.state_change, a.usename,
         a.application_name, a.client_addr, a.client_port, a.query
ORDER BY a.xact_start
LIMIT 20
"""
_HIDDEN = (
    "SELECT count(*), current_user, current_database() FROM pg_stat_activity "
    "WHERE datname = current_database() AND backend_type IS NULL"  # what another role's session shows
)
_SCHEDULER_JOBS = (
    "SELECT id, state, latest_heartbeat, hostname, start_date FROM job "
    "WHERE job_type = 'SchedulerJob' AND (state = 'running' OR latest_heartbeat >= %s) "
    "ORDER BY latest_heartbeat DESC LIMIT 100"
)
# Re-checks, in the statement that signals, that the session is still the one judged orphaned:
# the same backend, the same transaction, idle since the same moment, still holding the locks.
_TERMINATE = """
SELECT pg_terminate_backend(a.pid{wait})
FROM pg_stat_activity a
WHERE a.pid = %(pid)s AND a.backend_start = %(backend_start)s AND a.xact_start = %(xact_start)s
  AND a.state_change = %(idle_since)s AND a.state = ANY(%(states)s)
  AND EXISTS (
    SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
    WHERE l.pid = a.pid AND l.granted AND l.locktype = 'relation' AND l.mode <> 'AccessShareLock'
      AND c.relname = ANY(%(tables)s))
"""


def _fetch(conn: Any, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def idle_lock_holders(conn: Any, idle_seconds: float) -> list[tuple[Any, ...]]:
    """Sessions idle in a transaction for ``idle_seconds`` or more that hold scheduler-table locks.

    Each row: pid, state, backend_start, xact_start, state_change, now(), user, application,
    client address, client port, last query, locks ("relname Mode", sorted).
    """
    params = {"states": list(IDLE_STATES), "tables": list(SCHEDULER_TABLES), "idle": float(idle_seconds)}
    return _fetch(conn, _HOLDERS, params)


def hidden_sessions(conn: Any) -> tuple[int, str, str]:
    """How many client sessions' state this role cannot see, the role's name and the database's."""
    count, user, database = _fetch(conn, _HIDDEN)[0]
    return int(count), str(user), str(database)


def scheduler_jobs(conn: Any, since: datetime) -> list[JobRecord]:
    """Scheduler ``job`` rows running, or heartbeating at ``since`` or later, with their start."""
    return [
        JobRecord(
            "scheduler",
            parse_timestamp(beat),
            state=state,
            job_id=int(job_id),
            hostname=hostname,
            start_date=parse_timestamp(started),
        )
        for job_id, state, beat, hostname, started in _fetch(conn, _SCHEDULER_JOBS, (since,))
    ]


def terminate(conn: Any, key: Sequence[Any], wait_ms: int) -> bool | None:
    """``pg_terminate_backend`` the session ``key`` = (pid, backend_start, xact_start, idle_since).

    Returns None when that session is no longer the one judged (gone, or it moved on), else what
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
        "tables": list(SCHEDULER_TABLES),
    }
    rows = _fetch(conn, _TERMINATE.format(wait=wait), params)
    return bool(rows[0][0]) if rows else None
