"""The wedge: a dead scheduler's open transaction that keeps its restarted successor from queueing.

A scheduler killed inside its critical section leaves its metadata-DB session ``idle in
transaction``, holding row locks on ``slot_pool`` (and often ``task_instance``). The session never
closes, because every process the scheduler forked (LocalExecutor workers, ``serve-logs``)
inherited its socket. The restarted scheduler heartbeats normally, but its critical section
(``SELECT ... FROM slot_pool FOR NO KEY UPDATE NOWAIT``) fails every loop, so it queues nothing.
See docs/design.md, "How Airflow behaves on a crash" and "Watchdog and alerting".

**What proves a session is a dead scheduler's.** All three, or it is never terminated:

(a) **Airflow's tables.** It is ``idle in transaction`` for at least the wedge threshold and holds
    a lock stronger than ``AccessShareLock`` (a row lock) on one of Airflow's scheduler tables in
    the metadata schema, matched by oid (:func:`~airflow_crashsafe.watchdog.pg_sessions.metadata_tables`):
    a table of another schema that shares the name is never considered.
(b) **Identity.** Its ``application_name`` is the identity the plugin makes every scheduler set on
    its own metadata sessions (:mod:`airflow_crashsafe.component_identity`), naming a scheduler
    job that is now dead, and the host the identity names is that job row's ``hostname``. A
    person's session, another component's (api-server, triggerer, dag-processor), a live
    replica's or a scheduler's forked child's never carries it.
(c) **Time.** Every live scheduler (``job`` row ``running``, heartbeat fresher than the heartbeat
    threshold) started more than :data:`CLOCK_MARGIN` seconds after the transaction began, and
    the session was opened while that dead scheduler was alive — no earlier than
    :data:`STARTUP_MARGIN` seconds before its job started, no later than its last heartbeat plus
    the heartbeat threshold — with the transaction begun after it started. The transaction's
    begin is not bounded by the dead scheduler's last heartbeat: the scheduler heartbeats once per
    loop, after the critical section, so on a loaded host its last transaction can begin well
    after its last heartbeat; the live schedulers' start already bounds it from above.

With no live scheduler at all there is no successor to unblock: that is "scheduler dead", whose
alert lists such sessions. A session that holds the scheduler's locks while a live scheduler
exists but is not proven is paged for a person to decide (:mod:`~airflow_crashsafe.watchdog.wedge_alerts`).
Healing (``--heal``) terminates only proven sessions, and re-checks in the terminating statement
itself that the session is still the one judged.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_crashsafe.component_identity.name import ComponentIdentity, parse
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog import pg_sessions
from airflow_crashsafe.watchdog.health import JobRecord, is_alive, parse_timestamp
from airflow_crashsafe.watchdog.pg_sessions import Relation

__all__ = [
    "CLOCK_MARGIN",
    "STARTUP_MARGIN",
    "IdleTransaction",
    "TableLock",
    "WedgeWatch",
    "prove_orphaned",
]

log = logging.getLogger(__name__)

#: Seconds by which a live scheduler's start must follow the transaction's begin (clock skew).
CLOCK_MARGIN = 1.0
#: Seconds a scheduler may open its first session before its ``job`` row records its start.
STARTUP_MARGIN = 60.0
_INSUFFICIENT_PRIVILEGE = "42501"


@dataclass(frozen=True)
class TableLock:
    """A table-level lock a session holds: on which table (by oid), in which mode."""

    table: Relation
    mode: str

    @property
    def oid(self) -> int:
        return self.table.oid

    def __str__(self) -> str:
        return f"{self.table} {self.mode}"


@dataclass(frozen=True)
class IdleTransaction:
    """A metadata-DB session idle in a transaction while holding row locks on Airflow's tables.

    ``owner`` is the dead scheduler it was proven to belong to (None: not proven, ``verdict`` says
    why); ``on_airflow_tables`` whether the proof found its locks on Airflow's scheduler tables;
    ``heal`` records what ``--heal`` did to it this poll.
    """

    pid: int
    state: str
    backend_start: datetime
    xact_start: datetime
    idle_since: datetime
    db_now: datetime
    locks: tuple[TableLock, ...]
    database: str = ""
    user: str | None = None
    application: str | None = None
    client: str | None = None
    owner: JobRecord | None = None
    verdict: str = ""
    on_airflow_tables: bool = False
    live: tuple[JobRecord, ...] = ()
    heal: Mapping[str, Any] | None = field(default=None)

    @property
    def orphaned(self) -> bool:
        return self.owner is not None

    @property
    def identity(self) -> ComponentIdentity | None:
        """The Airflow component its ``application_name`` names, if it names one."""
        return parse(self.application)

    @property
    def idle_seconds(self) -> float:
        return max(0.0, (self.db_now - self.idle_since).total_seconds())

    @property
    def age_seconds(self) -> float:
        return max(0.0, (self.db_now - self.xact_start).total_seconds())

    @property
    def key(self) -> tuple[Any, ...]:
        """What identifies this very transaction: backend, its start, the transaction, idle since."""
        return (self.pid, self.backend_start, self.xact_start, self.idle_since)

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly summary for alert details: who, since when, what it locks (no SQL text)."""
        identity = self.identity
        out: dict[str, Any] = {
            "backend_pid": self.pid,
            "state": self.state,
            "user": self.user,
            "application_name": self.application,
            "client": self.client,
            "idle_seconds": round(self.idle_seconds),
            "transaction_age_seconds": round(self.age_seconds),
            "backend_start": self.backend_start.isoformat(),
            "transaction_began": self.xact_start.isoformat(),
            "idle_since": self.idle_since.isoformat(),
            "locks": [str(lock) for lock in self.locks],
            "identity": identity.describe() if identity else None,
            "verdict": self.verdict,
        }
        if self.owner is not None:
            out["dead_scheduler"] = self.owner.describe()
        if self.live:
            out["live_schedulers"] = [job.describe() for job in self.live]
        return out


def _from_row(row: tuple[Any, ...], database: str, tables: Mapping[int, Relation]) -> IdleTransaction:
    pid, state, backend_start, xact_start, idle_since, db_now, user, app, host, port, oids, modes = row
    client = f"{host}:{port}" if host else ("local socket" if port == -1 else None)
    stamps = [parse_timestamp(value) for value in (backend_start, xact_start, idle_since, db_now)]
    assert all(stamp is not None for stamp in stamps)  # an idle-in-transaction session has them all
    started, began, idle, now = (stamp for stamp in stamps if stamp is not None)
    locks = tuple(
        TableLock(tables.get(int(oid), Relation(int(oid), "?", f"oid {oid}")), str(mode))
        for oid, mode in zip(oids, modes, strict=True)
    )
    return IdleTransaction(
        pid=int(pid),
        state=str(state),
        backend_start=started,
        xact_start=began,
        idle_since=idle,
        db_now=now,
        locks=locks,
        database=database,
        user=user,
        application=app or None,
        client=client,
    )


def _not_proven(tx: IdleTransaction, why: str) -> IdleTransaction:
    return replace(tx, owner=None, verdict=why)


def prove_orphaned(
    tx: IdleTransaction,
    schedulers: list[JobRecord],
    now: datetime,
    threshold: float,
    tables: Collection[int],
) -> IdleTransaction:
    """``tx`` with its verdict: the dead scheduler it is proven to belong to, or why that is not proven.

    ``tables`` are the oids of Airflow's scheduler tables in the metadata schema (the proof's part
    (a)); ``schedulers`` the scheduler ``job`` rows; ``threshold`` the heartbeat age that means dead.
    """
    live = tuple(job for job in schedulers if is_alive(job, now, threshold))
    airflow = tuple(lock for lock in tx.locks if lock.oid in tables)  # the others are never considered
    tx = replace(tx, live=live, locks=airflow or tx.locks, on_airflow_tables=bool(airflow))
    if not tx.on_airflow_tables:
        return _not_proven(tx, "it holds no row lock on Airflow's scheduler tables in the metadata schema")
    if not live:
        return _not_proven(tx, "no live scheduler: nothing is blocked until one starts")
    identity = tx.identity
    if identity is None:
        return _not_proven(
            tx,
            f"its application_name {tx.application!r} is not an Airflow scheduler's identity: it may be "
            "a person's session, another program's, or a scheduler running without airflow-crashsafe",
        )
    if identity.component != "scheduler":
        why = f"it is Airflow's {identity.component} (job {identity.job_id}), not a scheduler"
        return _not_proven(tx, why)
    job = next((j for j in schedulers if j.job_id == identity.job_id), None)
    if job is None:
        why = f"it names scheduler job {identity.job_id}, which is no scheduler in the job table"
        return _not_proven(tx, why)
    if job in live:
        return _not_proven(tx, f"it is live scheduler job {job.job_id}'s own session")
    if not identity.host_matches(job.hostname):
        return _not_proven(
            tx, f"it names host {identity.host!r}, but scheduler job {job.job_id} ran on {job.hostname!r}"
        )
    return _prove_timing(tx, job, live, threshold)


def _prove_timing(
    tx: IdleTransaction, job: JobRecord, live: tuple[JobRecord, ...], threshold: float
) -> IdleTransaction:
    """Part (c): opened while ``job`` ran, begun after it started and before every live one did."""
    margin = timedelta(seconds=CLOCK_MARGIN)
    for other in live:
        if other.start_date is None or other.start_date - margin <= tx.xact_start:
            started = other.start_date.isoformat() if other.start_date else "an unknown time"
            why = f"live scheduler job {other.job_id} started at {started}, not after the transaction began"
            return _not_proven(tx, f"{why}: it may own it")
    if job.start_date is None or job.latest_heartbeat is None:
        return _not_proven(tx, f"scheduler job {job.job_id} has no recorded start or heartbeat")
    slack, startup = timedelta(seconds=threshold), timedelta(seconds=STARTUP_MARGIN)
    if not job.start_date - startup <= tx.backend_start <= job.latest_heartbeat + slack:
        opened = tx.backend_start.isoformat()
        return _not_proven(tx, f"it was opened at {opened}, outside the time scheduler job {job.job_id} ran")
    if tx.xact_start < job.start_date - margin:
        return _not_proven(tx, f"its transaction began before scheduler job {job.job_id} started")
    verdict = (
        f"scheduler job {job.job_id} on {job.hostname} (pid {tx.identity.pid if tx.identity else '?'}) "
        f"opened it at {tx.backend_start.isoformat()}, began it at {tx.xact_start.isoformat()} before "
        f"every live scheduler started, and is dead (last heartbeat {job.latest_heartbeat.isoformat()})"
    )
    return replace(tx, owner=job, verdict=verdict)


@dataclass(frozen=True)
class WedgeWatch:
    """Looks for wedges on each poll of the metadata DB and, with ``heal``, terminates them.

    :param idle_threshold: seconds a session must be idle in its transaction to be considered.
    :param heartbeat_threshold: heartbeat age that means a scheduler is dead (the rules' threshold).
    :param wait_ms: how long ``pg_terminate_backend`` waits for the backend to go (PostgreSQL 14+).
    """

    idle_threshold: float = 60.0
    heartbeat_threshold: float = 30.0
    heal: bool = False
    wait_ms: int = 2000

    def __post_init__(self) -> None:
        if self.idle_threshold <= 0 or self.heartbeat_threshold <= 0:
            raise ConfigurationError("--wedge-threshold and --threshold must be > 0 seconds")

    def inspect(self, conn: Any, now: datetime) -> tuple[tuple[IdleTransaction, ...], list[str]]:
        """The judged lock holders (healed where allowed), and notes on what could not be seen."""
        notes: list[str] = []
        hidden, role, database = pg_sessions.hidden_sessions(conn)
        if hidden:
            notes.append(
                f"{hidden} session(s) of {database} are hidden from role {role}: GRANT "
                f"pg_read_all_stats TO {role} so that the watchdog can see a wedge"
            )
        tables = pg_sessions.metadata_tables(conn)
        if not tables:
            notes.append(f"no Airflow job table on {role}'s search_path in {database}: wedges not checked")
            return (), notes
        rows = pg_sessions.idle_lock_holders(conn, self.idle_threshold, list(tables))
        if not rows:
            return (), notes
        found = [_from_row(row, database, tables) for row in rows]
        since = min(tx.backend_start for tx in found) - timedelta(seconds=self.heartbeat_threshold)
        named = [tx.identity.job_id for tx in found if tx.identity is not None]
        schedulers = pg_sessions.scheduler_jobs(conn, since, named)
        judged = [prove_orphaned(tx, schedulers, now, self.heartbeat_threshold, tables) for tx in found]
        if self.heal:
            judged = [self._heal(conn, tx, role, now, list(tables)) if tx.orphaned else tx for tx in judged]
        return tuple(judged), notes

    def _heal(
        self, conn: Any, tx: IdleTransaction, role: str, now: datetime, oids: list[int]
    ) -> IdleTransaction:
        record: dict[str, Any] = {"action": f"SELECT pg_terminate_backend({tx.pid})", "at": now.isoformat()}
        try:
            answer = pg_sessions.terminate(conn, tx.key, self.wait_ms, application=tx.application, oids=oids)
        except Exception as exc:  # a refusal is a finding for the alert, never a crash
            lines = str(exc).strip().splitlines()
            refused = getattr(exc, "sqlstate", None) == _INSUFFICIENT_PRIVILEGE
            record["result"] = "refused" if refused else "failed"
            record["error"] = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
            record["fix"] = (
                f"GRANT pg_signal_backend TO {role}; (only a superuser may end a superuser's "
                "session) — or run the remedy by hand"
            )
            log.warning("--heal could not terminate backend %s: %s", tx.pid, record["error"])
            return replace(tx, heal=record)
        if answer is None:
            record["result"] = "gone: the session ended or moved on before it was signalled; nothing done"
        elif answer:
            record["result"] = "terminated"
            log.warning("--heal terminated backend %s (%s)", tx.pid, tx.verdict)
        else:
            record["result"] = f"signalled, still present after {self.wait_ms} ms"
        return replace(tx, heal=record)
