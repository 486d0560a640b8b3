"""Report parts added by later issues: vendor payments, the audit's view, the watchdog's alert.

Pure functions from facts to report rows, sections and broken invariants, like
:mod:`~airflow_crashsafe.drill.report`. The payment invariant is "never two payments for one
intended", not "every push succeeded": a push to a vendor that ignores idempotency keys stops with
``OutcomeUnknown`` when an earlier attempt may have paid, and a person decides.
"""

from __future__ import annotations

from airflow_crashsafe.drill.extra_facts import AlertFact, AuditFact, PaymentFact
from airflow_crashsafe.drill.facts import DagFacts, TaskFact

__all__ = [
    "STOPPED_FOR_PERSON",
    "alert_lines",
    "audit_lines",
    "payment_invariants",
    "payment_rows",
    "stopped_for_person",
]

STOPPED_FOR_PERSON = "stopped: outcome unknown, needs a person"


def stopped_for_person(task: TaskFact) -> bool:
    """A task that failed because a call's outcome was unknown and its target does not honour keys."""
    return (
        task.final_state == "failed"
        and bool(task.attempts)
        and task.attempts[-1].outcome == "outcome_unknown"
    )


def _booked(facts: list[PaymentFact]) -> str:
    booked = sum(p.booked for p in facts)
    twice = sum(p.booked > p.intended for p in facts)
    missing = sum(p.booked < p.intended for p in facts)
    text = str(booked)
    if twice:
        text += (
            f" ({twice} paid twice)"
            if all(p.booked <= 2 for p in facts)
            else f" ({twice} paid more than once)"
        )
    if missing:
        text += f" ({missing} not booked)"
    return text


def payment_rows(payments: list[PaymentFact], dag: DagFacts | None) -> dict[str, str]:
    """Rows per vendor: intended, requests received (and keys), booked, and how the pushes ended."""
    rows: dict[str, str] = {}
    by_task = {t.task_id: t for t in dag.tasks} if dag is not None else {}
    for vendor in dict.fromkeys(p.vendor for p in payments):
        mine = [p for p in payments if p.vendor == vendor]
        keys = sum(p.keys for p in mine)
        received = str(sum(p.received for p in mine))
        received += f" under {keys} keys" if keys else " (no key)"
        rows[f"{vendor} vendor: payments intended"] = str(sum(p.intended for p in mine))
        rows[f"{vendor} vendor: requests received"] = received
        rows[f"{vendor} vendor: payments booked"] = _booked(mine)
        ends: dict[str, int] = {}
        for p in mine:
            task = by_task.get(p.task_id)
            state = (
                "?"
                if task is None
                else (STOPPED_FOR_PERSON if stopped_for_person(task) else str(task.final_state))
            )
            ends[state] = ends.get(state, 0) + 1
        rows[f"{vendor} vendor: pushes ended"] = ", ".join(f"{n} {s}" for s, n in ends.items())
    return rows


def payment_invariants(payments: list[PaymentFact]) -> list[str]:
    """Crashsafe's payment promise: booked <= intended for every payment."""
    return [
        f"{p.vendor} vendor booked payment {p.payment} {p.booked} times "
        f"for {p.intended} intended ({p.task_id})"
        for p in payments
        if p.booked > p.intended
    ]


def audit_lines(dag_id: str, facts: list[AuditFact]) -> list[str]:
    """The audit's per-task table for one DAG: executions, processes, overlap, verdict."""
    lines = [f"  {dag_id}: {len(facts)} slots executed more than once"]
    if not facts:
        return lines
    header = ("task", "runs", "host pid of each run", "overlap", "classification", "protection", "verdict")
    rows = [header]
    for f in facts:
        verdict = f"HARMFUL ({f.risk} risk)" if f.harmful else "harmless"
        rows.append(
            (
                f.task_id,
                str(f.executions),
                ", ".join(p or "?" for p in f.processes),
                f"{f.overlap_seconds:.1f} s" if f.overlap_seconds else "-",
                "+".join(f.kinds) or "-",
                f.protection,
                verdict,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def alert_lines(alert: AlertFact | None) -> list[str]:
    """SIGKILL -> alert at the webhook, restart -> resolve, with the watchdog's settings."""
    if alert is None:
        return []
    lines = [f"Watchdog beside Airflow ({alert.settings}), alerts to a local webhook:"]
    if alert.kill_to_alert is None and alert.open_at_kill:
        lines.append("  SIGKILL -> alert: none new, a scheduler-dead incident was already open (see below)")
    elif alert.kill_to_alert is None:
        lines.append("  SIGKILL -> alert: NO ALERT received")
    else:
        lines.append(f"  SIGKILL -> alert delivered: {alert.kill_to_alert:.1f} s ({alert.alert_summary})")
    if alert.restart_to_resolve is None:
        lines.append("  restart -> resolve: no resolve received")
    else:
        lines.append(f"  restart -> resolve delivered: {alert.restart_to_resolve:.1f} s")
    if alert.false_alarms:
        lines.append(
            f"  {alert.false_alarms} scheduler-dead alert(s) before the kill: the loaded scheduler's "
            "heartbeat was later than the threshold (Airflow's own health said unhealthy too)"
        )
    return lines
