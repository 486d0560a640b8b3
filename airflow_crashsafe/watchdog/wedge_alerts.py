"""What the judged lock holders page (see :mod:`airflow_crashsafe.watchdog.wedge`), and the canary's cause.

Two conditions, with separate keys because they ask for different things:

- ``scheduler_wedged:<pid>`` (critical): a session **proven** a dead scheduler's. ``--heal`` may
  have ended it in this very poll, and the page says so.
- ``scheduler_lock_holder:<pid>``: a session holding row locks on Airflow's scheduler tables in
  the metadata schema past the wedge threshold while a live scheduler exists, that is **not**
  proven a dead scheduler's — a person's SQL client, another component, a scheduler running
  without the identity. It is never terminated; the page names it (user, application, client,
  idle time, transaction age, tables and lock modes), says why it was not terminated and gives
  the exact statement a person would run. Critical when it locks ``slot_pool`` — every
  scheduling loop takes all pool rows ``NOWAIT``, so such a lock may stop all queueing, as a wedge
  does — a warning otherwise (it blocks only the rows it holds).

Both skip the grace: the wedge threshold already is one. No query text is ever part of a page.
"""

from __future__ import annotations

from typing import Any

from airflow_crashsafe.alerting.incidents import Condition
from airflow_crashsafe.watchdog.health import Observation
from airflow_crashsafe.watchdog.wedge import IdleTransaction

__all__ = [
    "HOLDER_KEY",
    "NO_GRACE_KEYS",
    "WEDGE_KEY",
    "holder_remedy",
    "remedy",
    "stall_cause",
    "wedge_conditions",
]

#: Incident key prefix of a proven wedge: ``scheduler_wedged:<backend pid>``.
WEDGE_KEY = "scheduler_wedged"
#: Incident key prefix of an unproven holder of the scheduler's locks: ``scheduler_lock_holder:<pid>``.
HOLDER_KEY = "scheduler_lock_holder"
#: Key prefixes that page without the grace (their idle threshold already is one).
NO_GRACE_KEYS = (f"{WEDGE_KEY}:", f"{HOLDER_KEY}:")


def remedy(tx: IdleTransaction) -> str:
    """The exact fix of a proven wedge, for the alert text."""
    database = tx.database or "<metadata database>"
    return (
        f"On database {database}, as a superuser or a member of pg_signal_backend: "
        f"SELECT pg_terminate_backend({tx.pid}); the restarted scheduler queues again at its next "
        f"loop. Prevent it: ALTER DATABASE {database} SET idle_in_transaction_session_timeout = '5min' "
        "(or start PostgreSQL with -c idle_in_transaction_session_timeout=5min), or run the "
        "watchdog with --heal."
    )


def holder_remedy(tx: IdleTransaction) -> str:
    """What a person does about an unproven holder: ask its owner, or end exactly this transaction."""
    database = tx.database or "<metadata database>"
    who = f"user {tx.user or '?'}, application {tx.application or '(none)'!r}, client {tx.client or '?'}"
    return (
        f"Decide whose session this is ({who}). If it is a person's, ask them to COMMIT or ROLLBACK. "
        f"To end it, on database {database} as a superuser or a member of pg_signal_backend: "
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = {tx.pid} "
        f"AND backend_start = '{tx.backend_start.isoformat()}' "
        f"AND xact_start = '{tx.xact_start.isoformat()}'; "
        "(it ends this very transaction or nothing; its uncommitted work is lost)."
    )


def _wedged(tx: IdleTransaction) -> Condition:
    summary = (
        f"Restarted scheduler blocked by a dead scheduler's open transaction (backend pid "
        f"{tx.pid}, idle {tx.idle_seconds:.0f} s, holding {', '.join(map(str, tx.locks))})"
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
    return Condition(key, "critical", summary, tx.idle_since, details)


def _holder(tx: IdleTransaction) -> Condition:
    pool = any(lock.table.name == "slot_pool" for lock in tx.locks)
    summary = (
        f"Session holding the scheduler's locks, not proven a dead scheduler's: not terminated, a "
        f"person decides (backend pid {tx.pid}, user {tx.user or '?'}, application "
        f"{tx.application or '(none)'!r}, client {tx.client or '?'}, idle {tx.idle_seconds:.0f} s, "
        f"transaction {tx.age_seconds:.0f} s old, holding {', '.join(map(str, tx.locks))})"
    )
    details: dict[str, Any] = {
        **tx.describe(),
        "terminated": False,
        "why_not_terminated": tx.verdict,
        "blocks": "every scheduling loop (its pool rows)" if pool else "the scheduler on the rows it holds",
        "remedy": holder_remedy(tx),
    }
    key = f"{HOLDER_KEY}:{tx.pid}"
    return Condition(key, "critical" if pool else "warning", summary, tx.idle_since, details)


def wedge_conditions(observation: Observation) -> dict[str, Condition]:
    """A page per proven wedge, and one per unproven holder of Airflow's locks beside a live scheduler."""
    found: dict[str, Condition] = {}
    for tx in observation.idle_transactions or ():
        if tx.orphaned:
            condition = _wedged(tx)
        elif tx.on_airflow_tables and tx.live:
            condition = _holder(tx)
        else:
            continue
        found[condition.key] = condition
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
