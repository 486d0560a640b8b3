"""The wedge: a dead scheduler's open transaction that keeps its restarted successor from queueing.

A scheduler killed inside its critical section leaves its metadata-DB session ``idle in
transaction``, holding row locks on ``slot_pool`` (and often ``task_instance``). The session never
closes, because every process the scheduler forked (LocalExecutor workers, ``serve-logs``)
inherited its socket. The restarted scheduler heartbeats normally, but its critical section
(``SELECT ... FROM slot_pool FOR NO KEY UPDATE NOWAIT``) fails every loop, so it queues nothing.
See docs/design.md, "How Airflow behaves on a crash" and "Watchdog and alerting".

**How "no live scheduler owns it" is proven.** PostgreSQL cannot name a session's client process
(the socket is shared by the dead scheduler's children), so ownership is proven from time, from
what ``pg_stat_activity`` and the ``job`` table show:

1. the session is ``idle in transaction`` for at least the wedge threshold and holds a lock
   stronger than ``AccessShareLock`` (a row lock) on a scheduler table;
2. every live scheduler (``job`` row ``running``, heartbeat fresher than the heartbeat threshold)
   started more than :data:`CLOCK_MARGIN` seconds after the transaction began: no scheduler owns a
   transaction begun before it existed;
3. the session was opened while a scheduler that is now dead was alive — no earlier than
   :data:`STARTUP_MARGIN` seconds before its job started, no later than its last heartbeat plus
   the heartbeat threshold — and the transaction began after that scheduler started. A session
   of a process older than it (an api-server, say) is never its. The transaction's begin is not
   bounded by the dead scheduler's last heartbeat: the scheduler heartbeats once per loop, after
   the critical section, so on a loaded host its last transaction can begin well after its last
   heartbeat; rule 2 already bounds it from above.

With no live scheduler at all there is no successor to unblock: that is "scheduler dead", whose
alert lists such sessions. With an HA replica that started before the transaction, ownership
cannot be proven, so nothing is paged as a wedge or healed; the canary's stall names the session
as a suspect instead. Healing (``--heal``) terminates only sessions proven orphaned, and re-checks
in the terminating statement itself that the session is still the one judged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_crashsafe.alerting.incidents import Condition
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog import pg_sessions
from airflow_crashsafe.watchdog.health import JobRecord, Observation, is_alive, parse_timestamp

__all__ = [
    "CLOCK_MARGIN",
    "STARTUP_MARGIN",
    "WEDGE_KEY",
    "IdleTransaction",
    "WedgeWatch",
    "prove_orphaned",
    "remedy",
    "stall_cause",
    "wedge_conditions",
]

log = logging.getLogger(__name__)

#: Seconds by which a live scheduler's start must follow the transaction's begin (clock skew).
CLOCK_MARGIN = 1.0
#: Seconds a scheduler may open its first session before its ``job`` row records its start.
STARTUP_MARGIN = 60.0
#: Incident key prefix: ``scheduler_wedged:<backend pid>``.
WEDGE_KEY = "scheduler_wedged"
_INSUFFICIENT_PRIVILEGE = "42501"


@dataclass(frozen=True)
class IdleTransaction:
    """A metadata-DB session idle in a transaction while holding scheduler-table locks.

    ``owner`` is the dead scheduler it was proven to belong to (None: not proven, ``verdict`` says
    why); ``heal`` records what ``--heal`` did to it this poll.
    """

    pid: int
    state: str
    backend_start: datetime
    xact_start: datetime
    idle_since: datetime
    db_now: datetime
    locks: tuple[str, ...]
    database: str = ""
    user: str | None = None
    application: str | None = None
    client: str | None = None
    last_query: str | None = None
    owner: JobRecord | None = None
    verdict: str = ""
    live: tuple[JobRecord, ...] = ()
    heal: Mapping[str, Any] | None = field(default=None)

    @property
    def orphaned(self) -> bool:
        return self.owner is not None

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
        """A JSON-friendly summary for alert details."""
        out: dict[str, Any] = {
            "backend_pid": self.pid,
            "state": self.state,
            "idle_seconds": round(self.idle_seconds),
            "transaction_age_seconds": round(self.age_seconds),
            "transaction_began": self.xact_start.isoformat(),
            "idle_since": self.idle_since.isoformat(),
            "locks": list(self.locks),
            "user": self.user,
            "application_name": self.application,
            "client": self.client,
            "last_query": self.last_query,
            "verdict": self.verdict,
        }
        if self.owner is not None:
            out["dead_scheduler"] = self.owner.describe()
        if self.live:
            out["live_schedulers"] = [job.describe() for job in self.live]
        return out


def _from_row(row: tuple[Any, ...], database: str) -> IdleTransaction:
    pid, state, backend_start, xact_start, idle_since, db_now, user, app, host, port, query, locks = row
    client = f"{host}:{port}" if host else ("local socket" if port == -1 else None)
    stamps = [parse_timestamp(value) for value in (backend_start, xact_start, idle_since, db_now)]
    assert all(stamp is not None for stamp in stamps)  # an idle-in-transaction session has them all
    started, began, idle, now = (stamp for stamp in stamps if stamp is not None)
    return IdleTransaction(
        pid=int(pid),
        state=str(state),
        backend_start=started,
        xact_start=began,
        idle_since=idle,
        db_now=now,
        locks=tuple(locks),
        database=database,
        user=user,
        application=app or None,
        client=client,
        last_query=query,
    )


def prove_orphaned(
    tx: IdleTransaction, schedulers: list[JobRecord], now: datetime, threshold: float
) -> IdleTransaction:
    """``tx`` with its verdict: which dead scheduler owns it, or why that is not proven."""
    live = tuple(job for job in schedulers if is_alive(job, now, threshold))
    if not live:
        return replace(tx, verdict="no live scheduler: nothing is blocked until one starts")
    margin = timedelta(seconds=CLOCK_MARGIN)
    for job in live:
        if job.start_date is None or job.start_date - margin <= tx.xact_start:
            started = job.start_date.isoformat() if job.start_date else "an unknown time"
            why = f"live scheduler job {job.job_id} started at {started}, not after the transaction began"
            return replace(tx, live=live, verdict=f"{why}: it may own it")
    slack = timedelta(seconds=threshold)
    startup = timedelta(seconds=STARTUP_MARGIN)
    for job in schedulers:
        if job in live or job.start_date is None or job.latest_heartbeat is None:
            continue
        opened_during = job.start_date - startup <= tx.backend_start <= job.latest_heartbeat + slack
        if opened_during and tx.xact_start >= job.start_date - margin:
            verdict = (
                f"opened at {tx.backend_start.isoformat()} while scheduler job {job.job_id} on "
                f"{job.hostname} ran (last heartbeat {job.latest_heartbeat.isoformat()}, now dead), "
                f"began at {tx.xact_start.isoformat()}, before every live scheduler started"
            )
            return replace(tx, owner=job, live=live, verdict=verdict)
    return replace(tx, live=live, verdict="no scheduler that is now dead was running when it was opened")


def remedy(tx: IdleTransaction) -> str:
    """The exact fix, for the alert text."""
    database = tx.database or "<metadata database>"
    return (
        f"On database {database}, as a superuser or a member of pg_signal_backend: "
        f"SELECT pg_terminate_backend({tx.pid}); the restarted scheduler queues again at its next "
        f"loop. Prevent it: ALTER DATABASE {database} SET idle_in_transaction_session_timeout = '5min' "
        "(or start PostgreSQL with -c idle_in_transaction_session_timeout=5min), or run the "
        "watchdog with --heal."
    )


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
        rows = pg_sessions.idle_lock_holders(conn, self.idle_threshold)
        if not rows:
            return (), notes
        found = [_from_row(row, database) for row in rows]
        since = min(tx.backend_start for tx in found) - timedelta(seconds=self.heartbeat_threshold)
        schedulers = pg_sessions.scheduler_jobs(conn, since)
        judged = [prove_orphaned(tx, schedulers, now, self.heartbeat_threshold) for tx in found]
        if self.heal:
            judged = [self._heal(conn, tx, role, now) if tx.orphaned else tx for tx in judged]
        return tuple(judged), notes

    def _heal(self, conn: Any, tx: IdleTransaction, role: str, now: datetime) -> IdleTransaction:
        record: dict[str, Any] = {"action": f"SELECT pg_terminate_backend({tx.pid})", "at": now.isoformat()}
        try:
            answer = pg_sessions.terminate(conn, tx.key, self.wait_ms)
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


def wedge_conditions(observation: Observation) -> dict[str, Condition]:
    """One critical condition per session proven orphaned: ``scheduler_wedged:<pid>``."""
    found: dict[str, Condition] = {}
    for tx in observation.idle_transactions or ():
        if not tx.orphaned:
            continue
        summary = (
            f"Restarted scheduler blocked by a dead scheduler's open transaction (backend pid "
            f"{tx.pid}, idle {tx.idle_seconds:.0f} s, holding {', '.join(tx.locks)})"
        )
        result = str((tx.heal or {}).get("result", ""))
        if result == "terminated":
            summary += ": terminated by the watchdog (--heal)"
        elif result:
            summary += f": --heal {result.split(':')[0]}"
        details: dict[str, Any] = {
            **tx.describe(),
            "remedy": remedy(tx),
            "heal": dict(tx.heal) if tx.heal else "off: the watchdog heals it with --heal",
        }
        key = f"{WEDGE_KEY}:{tx.pid}"
        found[key] = Condition(key, "critical", summary, tx.idle_since, details)
    return found


def stall_cause(observation: Observation) -> tuple[str, str | None]:
    """Why the canary stalls, as far as the sessions show: (cause, summary suffix or None)."""
    sessions = observation.idle_transactions
    if sessions is None:
        return "unknown: the metadata DB's sessions are not watched (needs --db-url on PostgreSQL)", None
    wedged = [str(tx.pid) for tx in sessions if tx.orphaned]
    if wedged:
        pids = ", ".join(wedged)
        cause = f"wedge: a dead scheduler's open transaction (backend pid {pids}) blocks the scheduler"
        return cause, f" (wedged by a dead scheduler's open transaction, backend pid {pids})"
    if sessions:
        suspects = "; ".join(f"pid {tx.pid}: {tx.verdict}" for tx in sessions)
        return f"suspect: sessions idle in a transaction hold scheduler locks ({suspects})", None
    return "not a wedge: no session idle in a transaction holds the scheduler's locks", None
