"""Findings of the alerting DAG's checks, folded into incidents that open, repeat and resolve.

Each check task returns a *finding*, a plain JSON value (it travels as an XCom)::

    {"check": "heartbeats", "ran": True, "complete": True,
     "conditions": [{"key": "scheduler_dead", "severity": "critical", "summary": "...",
                     "began_at": "2026-01-01T03:00:00+00:00", "details": {...}}],
     "notes": ["jobs list unavailable: ..."]}

``ran`` False means the check was skipped (not configured): its incidents are left as they are.
``complete`` False means it ran but saw only part of what it checks (the api-server was not
readable): its open incidents are kept, not resolved. Incidents are the watchdog's own
:class:`~airflow_crashsafe.watchdog.rules.Incident`, keyed ``<check>:<condition key>``, so their
dedup keys have the watchdog's form and the same state file format serves both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.watchdog.health import parse_timestamp
from airflow_crashsafe.watchdog.rules import Condition, Incident

__all__ = ["Finding", "condition", "finding", "fold"]

Finding = dict[str, Any]


def condition(
    key: str,
    severity: str,
    summary: str,
    *,
    began_at: datetime | None = None,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One thing wrong right now, as a JSON value."""
    return {
        "key": key,
        "severity": severity,
        "summary": summary,
        "began_at": began_at.isoformat() if began_at else None,
        "details": dict(details or {}),
    }


def from_watchdog(found: Mapping[str, Condition]) -> list[dict[str, Any]]:
    """The watchdog's conditions (:func:`~airflow_crashsafe.watchdog.rules.conditions`) as JSON values."""
    return [
        condition(c.key, c.severity, c.summary, began_at=c.began_at, details=c.details)
        for c in found.values()
    ]


def finding(
    check: str,
    *,
    ran: bool = True,
    complete: bool = True,
    conditions: Iterable[Mapping[str, Any]] = (),
    notes: Iterable[str] = (),
) -> Finding:
    """What one check found."""
    return {
        "check": check,
        "ran": ran,
        "complete": complete,
        "conditions": [dict(c) for c in conditions],
        "notes": list(notes),
    }


def _alert(incident: Incident, event: str, now: datetime, instance: str, extra: Mapping[str, Any]) -> Alert:
    summary = incident.summary if event != "resolve" else f"recovered: {incident.summary}"
    return Alert(
        dedup_key=incident.dedup_key(instance),
        event=event,
        severity=incident.severity,
        summary=summary,
        source=instance,
        began_at=incident.began_at,
        at=now,
        details={**incident.details, "first_seen": incident.first_seen.isoformat(), **extra},
    )


def fold(
    incidents: Mapping[str, Incident],
    findings: Iterable[Finding],
    now: datetime,
    *,
    grace: float,
    repeat_interval: float,
    instance: str,
) -> tuple[dict[str, Incident], list[Alert]]:
    """Fold one run's findings into the incidents; return the new incidents and the alerts to send.

    Same semantics as the watchdog's ``evaluate``: a condition pages once it has lasted
    ``grace`` seconds, repeats every ``repeat_interval`` (0: never) and resolves when gone.
    """
    active: dict[str, dict[str, Any]] = {}
    settled: set[str] = set()  # checks whose absent conditions mean "resolved"
    for found in findings:
        check = str(found["check"])
        if found.get("ran") and found.get("complete", True):
            settled.add(check)
        for cond in found.get("conditions", []):
            active[f"{check}:{cond['key']}"] = dict(cond)
    result: dict[str, Incident] = {}
    alerts: list[Alert] = []
    for key, cond in active.items():
        incident = incidents.get(key) or Incident(
            key=key,
            severity=str(cond["severity"]),
            summary=str(cond["summary"]),
            first_seen=now,
            began_at=parse_timestamp(cond.get("began_at")) or now,
            details=dict(cond.get("details") or {}),
        )
        if incident.opened_at is None:
            if (now - incident.first_seen).total_seconds() >= grace:
                incident = replace(incident, opened_at=now, last_sent_at=now)
                alerts.append(_alert(incident, "trigger", now, instance, {}))
        elif (
            repeat_interval
            and incident.last_sent_at is not None
            and (now - incident.last_sent_at).total_seconds() >= repeat_interval
        ):
            incident = replace(incident, last_sent_at=now)
            open_for = round((now - (incident.opened_at or now)).total_seconds())
            alerts.append(_alert(incident, "repeat", now, instance, {"open_for_seconds": open_for}))
        result[key] = incident
    for key, incident in incidents.items():
        if key in active:
            continue
        if key.split(":", 1)[0] not in settled:
            result[key] = incident  # not looked at this time: keep as it is
        elif incident.opened_at is not None:
            lasted = round((now - incident.began_at).total_seconds())
            extra = {"resolved_at": now.isoformat(), "lasted_seconds": lasted}
            alerts.append(_alert(incident, "resolve", now, instance, extra))
    return result, alerts
