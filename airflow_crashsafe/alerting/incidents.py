"""The one incident engine: conditions seen over time become trigger / repeat / resolve alerts.

Every alert airflow-crashsafe raises is built here, whoever noticed the problem: the watchdog
(outside Airflow), the alerting DAG (inside it) and the audit (a risky duplicate run). Each says
*what is wrong right now* as :class:`Condition` values; :func:`advance` folds them into the
incidents it was given:

* a condition must last ``grace`` seconds (or its own ``min_duration``, if longer) before it
  pages, so a component that restarts inside the grace is silent;
* an open incident repeats every ``repeat_interval`` seconds (0: never);
* an incident whose condition is gone resolves, but only where the caller could look: what it
  could not judge this time (``judged(key)`` False) is kept as it is, neither resolved nor dropped.

One-off alerts whose "once" is kept elsewhere (the audit claims each slot in the store) use
:func:`page_once`. Pure: no clock, no I/O and no Airflow import (the watchdog runs without
Airflow). See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from airflow_crashsafe.alerting.model import Alert

__all__ = ["Condition", "Incident", "advance", "page_once"]


@dataclass(frozen=True)
class Condition:
    """Something wrong right now. ``min_duration`` extends the grace (e.g. a canary never run)."""

    key: str
    severity: str
    summary: str
    began_at: datetime | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    min_duration: float = 0.0
    #: A fixed incident id, for an incident that independent watchers (two watchdog replicas)
    #: must report under one dedup key; None: derived from the key and when it was first seen.
    dedup_id: str | None = None


@dataclass(frozen=True)
class Incident:
    """A condition being tracked: pending (``opened_at`` None) until its grace is over, then open."""

    key: str
    severity: str
    summary: str
    first_seen: datetime
    began_at: datetime
    details: Mapping[str, Any]
    min_duration: float = 0.0
    opened_at: datetime | None = None
    last_sent_at: datetime | None = None
    dedup_id: str | None = None

    @property
    def incident_id(self) -> str:
        """Deterministic, so a process that crashed mid-poll re-derives the same id."""
        if self.dedup_id:
            return self.dedup_id
        return hashlib.sha256(f"{self.key}|{self.first_seen.isoformat()}".encode()).hexdigest()[:12]

    def dedup_key(self, instance: str) -> str:
        return f"airflow-crashsafe:{instance}:{self.key}:{self.incident_id}"


def _alert(
    about: Condition | Incident,
    event: str,
    at: datetime,
    *,
    source: str,
    dedup_key: str,
    details: Mapping[str, Any],
) -> Alert:
    """The alert builder every alert goes through."""
    summary = about.summary if event != "resolve" else f"recovered: {about.summary}"
    return Alert(
        dedup_key=dedup_key,
        event=event,
        severity=about.severity,
        summary=summary,
        source=source,
        began_at=about.began_at or at,
        at=at,
        details=details,
    )


def _event(incident: Incident, event: str, at: datetime, instance: str, **extra: Any) -> Alert:
    details = {**incident.details, "first_seen": incident.first_seen.isoformat(), **extra}
    return _alert(
        incident, event, at, source=instance, dedup_key=incident.dedup_key(instance), details=details
    )


def page_once(condition: Condition, at: datetime, *, source: str, dedup_prefix: str) -> Alert:
    """A trigger alert for ``condition`` right now, keyed ``<dedup_prefix>:<condition key>``.

    For problems whose once-only delivery is recorded elsewhere: no grace, repeat or resolve.
    """
    dedup_key = f"{dedup_prefix}:{condition.key}"
    return _alert(condition, "trigger", at, source=source, dedup_key=dedup_key, details=condition.details)


def _repeat_due(incident: Incident, now: datetime, repeat_interval: float) -> bool:
    if not repeat_interval or incident.last_sent_at is None:
        return False
    return (now - incident.last_sent_at).total_seconds() >= repeat_interval


def advance(
    incidents: Mapping[str, Incident],
    active: Mapping[str, Condition],
    now: datetime,
    *,
    grace: float,
    repeat_interval: float,
    instance: str,
    judged: Callable[[str], bool],
) -> tuple[dict[str, Incident], list[Alert]]:
    """Fold the conditions ``active`` at ``now`` into ``incidents``.

    :param judged: whether an incident whose condition is absent was looked at this time (then it
        resolves) or not (then it is kept unchanged).
    :returns: the new incidents and the alerts to send, in that order of decision.
    """
    result: dict[str, Incident] = {}
    alerts: list[Alert] = []
    for key, condition in active.items():
        incident = incidents.get(key) or Incident(
            key=key,
            severity=condition.severity,
            summary=condition.summary,
            first_seen=now,
            began_at=condition.began_at or now,
            details=dict(condition.details),  # what was true when it was first seen
            min_duration=condition.min_duration,
            dedup_id=condition.dedup_id,
        )
        if incident.opened_at is None:
            if (now - incident.first_seen).total_seconds() >= max(grace, incident.min_duration):
                incident = replace(incident, opened_at=now, last_sent_at=now)
                alerts.append(_event(incident, "trigger", now, instance))
        elif _repeat_due(incident, now, repeat_interval):
            incident = replace(incident, last_sent_at=now)
            open_for = round((now - (incident.opened_at or now)).total_seconds())
            alerts.append(_event(incident, "repeat", now, instance, open_for_seconds=open_for))
        result[key] = incident
    for key, incident in incidents.items():
        if key in active:
            continue
        if not judged(key):
            result[key] = incident  # not looked at this time: keep as it is
        elif incident.opened_at is not None:
            lasted = round((now - incident.began_at).total_seconds())
            alerts.append(
                _event(incident, "resolve", now, instance, resolved_at=now.isoformat(), lasted_seconds=lasted)
            )
    return result, alerts
