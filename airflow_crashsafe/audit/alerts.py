"""Alert risky duplicates once per slot, through the same sinks the watchdog uses.

A risky slot is a :class:`~airflow_crashsafe.alerting.incidents.Condition` paged by the shared
incident engine (:func:`~airflow_crashsafe.alerting.incidents.page_once`): no grace, repeat or
resolve, because a duplicate run is a fact, not a state that can recover.

The store records each alerted slot (``crashsafe_audit_alerts``) in the transaction that spools the
alert to the dispatcher's outbox, so a slot is alerted once however many events or audit passes
see it, and an alert decided is never lost (the outbox retries delivery).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone

from airflow_crashsafe.alerting import Alert, Dispatcher
from airflow_crashsafe.alerting.incidents import Condition, page_once
from airflow_crashsafe.audit.classify import RISKS, SlotReport
from airflow_crashsafe.store.audit_alerts import claim_alert
from airflow_crashsafe.store.store import Store

__all__ = ["alert_for", "alert_risky"]

_SEVERITY = {"critical": "critical", "high": "critical", "low": "warning"}
_WORDS = {
    "overlap": "two attempts ran at once",
    "reset_rerun": "re-run after a reset or a lost worker",
    "rerun_after_clear": "re-run after a clear",
    "rerun_after_success": "re-run after success",
    "retry_after_failure": "retried after failure",
    "same_try_twice": "one try executed twice",
}


def alert_for(report: SlotReport, *, now: datetime | None = None) -> Alert:
    """The alert describing one risky slot."""
    now = now or datetime.now(timezone.utc)
    kinds = ", ".join(_WORDS[k] for k in report.kinds)
    overlap = f" (overlap {report.overlap_seconds:.1f} s)" if report.overlap_seconds else ""
    mapped = f"[{report.map_index}]" if report.map_index >= 0 else ""
    slot = f"{report.dag_id}.{report.task_id}{mapped} @ {report.partition}"
    risky = Condition(
        key=f"{report.dag_id}:{report.task_id}:{report.map_index}:{report.partition}",
        severity=_SEVERITY.get(report.risk, "warning"),
        summary=f"Unprotected task ran {len(report.executions)} times: {slot} - {kinds}{overlap}",
        began_at=report.reruns[0].later.started_at,
        details={
            "dag_id": report.dag_id,
            "task_id": report.task_id,
            "map_index": report.map_index,
            "partition": report.partition,
            "risk": report.risk,
            "kinds": list(report.kinds),
            "overlap_seconds": report.overlap_seconds,
            "protection": report.protection,
            "executions": [e.describe() for e in report.executions],
            "what_to_do": "Check the task's outputs for doubled rows or repeated external calls; make "
            "it fenced or ledgered (crashsafe operators), or mark it replay_safe if re-running is harmless.",
        },
    )
    return page_once(risky, now, source="airflow-crashsafe audit", dedup_prefix="crashsafe-duplicate")


def alert_risky(
    store: Store, dispatcher: Dispatcher, reports: Iterable[SlotReport], *, min_risk: str = "high"
) -> list[Alert]:
    """Spool one alert per newly risky slot (risk >= ``min_risk``), deliver, return what was raised."""
    raised = []
    floor = RISKS.index(min_risk)
    for report in reports:
        if RISKS.index(report.risk) < floor:
            continue
        alert = alert_for(report)
        with store.transaction() as db:
            if claim_alert(
                db,
                dag_id=report.dag_id,
                task_id=report.task_id,
                map_index=report.map_index,
                slot_partition=report.partition,
                risk=report.risk,
                summary=alert.summary,
            ):
                dispatcher.enqueue(alert)
                raised.append(alert)
    if raised:
        dispatcher.deliver()
    return raised
