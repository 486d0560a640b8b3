"""What the alerting DAG's checks return (findings), and how a run's findings page.

Each check task returns a *finding*, a plain JSON value (it travels as an XCom)::

    {"check": "heartbeats", "ran": True, "complete": True,
     "conditions": [{"key": "scheduler_dead", "severity": "critical", "summary": "...",
                     "began_at": "2026-01-01T03:00:00+00:00", "details": {...}}],
     "notes": ["jobs list unavailable: ..."]}

``ran`` False means the check was skipped (not configured): its incidents are left as they are.
``complete`` False means it ran but saw only part of what it checks (the api-server was not
readable): its open incidents are kept, not resolved. :func:`fold` hands the conditions to the
incident engine the watchdog uses too (:mod:`airflow_crashsafe.alerting.incidents`), keyed
``<check>:<condition key>``, so their dedup keys have the watchdog's form and the same state file
format serves both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from airflow_crashsafe.alerting.incidents import Condition, Incident, advance
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.watchdog.health import parse_timestamp

__all__ = ["Finding", "condition", "finding", "fold", "from_watchdog"]

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
    """The watchdog's conditions (:func:`~airflow_crashsafe.watchdog.rules.conditions`) as JSON values.

    ``min_duration`` is not carried: the heartbeat check judges no canary.
    """
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

    A condition pages once it has lasted ``grace`` seconds, repeats every ``repeat_interval``
    (0: never) and resolves when gone from a check that ran and saw everything.
    """
    active: dict[str, Condition] = {}
    settled: set[str] = set()  # checks whose absent conditions mean "resolved"
    for found in findings:
        check = str(found["check"])
        if found.get("ran") and found.get("complete", True):
            settled.add(check)
        for cond in found.get("conditions", []):
            key = f"{check}:{cond['key']}"
            active[key] = Condition(
                key=key,
                severity=str(cond["severity"]),
                summary=str(cond["summary"]),
                began_at=parse_timestamp(cond.get("began_at")),
                details=dict(cond.get("details") or {}),
            )
    return advance(
        incidents,
        active,
        now,
        grace=grace,
        repeat_interval=repeat_interval,
        instance=instance,
        judged=lambda key: key.split(":", 1)[0] in settled,
    )
