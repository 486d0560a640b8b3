"""What the metadata database says about the scheduler's sessions: who holds the pool locks, and how long.

The wedge scenario (:mod:`drill.wedge`) watches ``pg_locks`` for the backend holding
``RowShareLock`` on ``slot_pool`` — the lock the scheduler takes (``SELECT ... FOR UPDATE NOWAIT``)
at the start of its critical section and keeps until it commits — and ties that backend to the
scheduler process through its client port (psutil lists the process's sockets). After the kill
it reads the orphaned backend's age and locks, which processes still hold its socket, and the
task instances it keeps from being queued.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = ["Backend", "MetadataProbe", "socket_holders", "socket_ports"]

#: Backends holding the critical section's lock on the pool rows (ordinary reads take AccessShareLock).
_POOL_LOCKERS = """
SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
WHERE c.relname = 'slot_pool' AND l.mode = 'RowShareLock' AND l.granted AND l.pid <> pg_backend_pid()
"""
_BACKEND = """
SELECT a.pid, a.client_port, a.state, a.application_name,
       EXTRACT(EPOCH FROM now() - a.xact_start), EXTRACT(EPOCH FROM now() - a.state_change),
       COALESCE(array_agg(DISTINCT l.mode || ' on ' || c.relname)
                FILTER (WHERE c.relname IS NOT NULL AND c.relname NOT LIKE 'pg\\_%%'), '{}'),
       bool_or(l.locktype = 'advisory')
FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid LEFT JOIN pg_class c ON c.oid = l.relation
WHERE a.pid = %s GROUP BY a.pid, a.client_port, a.state, a.application_name, a.xact_start, a.state_change
"""
#: Seconds from the newest scheduler heartbeat to the begin of backend %s's transaction.
_BEGAN_AFTER_HEARTBEAT = """
SELECT EXTRACT(EPOCH FROM a.xact_start - max(j.latest_heartbeat))
FROM pg_stat_activity a, job j
WHERE a.pid = %s AND j.job_type = 'SchedulerJob' AND j.latest_heartbeat <= a.xact_start
GROUP BY a.xact_start
"""
_TI_STATES = "SELECT COALESCE(state, 'none'), count(*) FROM task_instance WHERE dag_id = %s GROUP BY 1"


@dataclass(frozen=True)
class Backend:
    """One metadata-DB session as ``pg_stat_activity`` and ``pg_locks`` show it."""

    pid: int
    client_port: int | None
    state: str
    #: Seconds since its transaction began (None: no transaction open).
    transaction_age: float | None
    #: Seconds since its state last changed (how long it has been idle).
    idle_for: float | None
    #: ``"RowShareLock on slot_pool"``, ... (relations only, catalogs left out).
    locks: tuple[str, ...]
    advisory_lock: bool
    #: The session's ``application_name`` (a scheduler's carries its identity, set by the plugin).
    application_name: str = ""

    @property
    def holds_pool_lock(self) -> bool:
        return "RowShareLock on slot_pool" in self.locks


def socket_ports(pid: int, server_port: int) -> set[int]:
    """Local ports of ``pid``'s TCP connections to the database server on ``server_port``."""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return set()
    return {c.laddr.port for c in connections if c.raddr and c.raddr.port == server_port}


def socket_holders(client_port: int, candidates: list[psutil.Process]) -> list[int]:
    """Which of ``candidates`` still hold the socket with local port ``client_port`` open."""
    holders = []
    for proc in candidates:
        try:
            if any(c.laddr.port == client_port for c in proc.net_connections(kind="tcp")):
                holders.append(proc.pid)
        except psutil.Error:
            continue
    return holders


class MetadataProbe:
    """An autocommit connection of the drill's own to the metadata database (``postgresql://``)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn: Any = psycopg.connect(url, autocommit=True, application_name="crashsafe-drill-probe")

    def pool_lockers(self) -> list[int]:
        """Backend pids holding ``RowShareLock`` on ``slot_pool`` right now (a fast query, polled)."""
        return [int(row[0]) for row in self.conn.execute(_POOL_LOCKERS).fetchall()]

    def backend(self, pid: int) -> Backend | None:
        """The session of backend ``pid``, None once it is gone."""
        row = self.conn.execute(_BACKEND, (pid,)).fetchone()
        if row is None:
            return None
        age, idle = (None if v is None else float(v) for v in (row[4], row[5]))
        locks = tuple(sorted(row[6]))
        return Backend(int(row[0]), row[1], str(row[2]), age, idle, locks, bool(row[7]), str(row[3] or ""))

    def began_after_heartbeat(self, pid: int) -> float | None:
        """Seconds between the last scheduler heartbeat before backend ``pid``'s transaction and its begin.

        The scheduler heartbeats after its critical section, so on a loaded host its last
        transaction may begin long after its last heartbeat: the watchdog's proof must allow it.
        """
        row = self.conn.execute(_BEGAN_AFTER_HEARTBEAT, (pid,)).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def ti_states(self, dag_id: str) -> dict[str, int]:
        """How many task instances of ``dag_id`` are in each state (``none`` for NULL)."""
        return {str(s): int(n) for s, n in self.conn.execute(_TI_STATES, (dag_id,)).fetchall()}

    def wait_gone(self, pid: int, timeout: float) -> bool:
        """Whether backend ``pid`` disappears within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.backend(pid) is None:
                return True
            time.sleep(0.2)
        return self.backend(pid) is None

    def close(self) -> None:
        self.conn.close()
