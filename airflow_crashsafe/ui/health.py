"""Scheduler health now and scheduler outages in the past, read inside the api-server.

Health now reuses the watchdog's parser (:func:`airflow_crashsafe.watchdog.health.parse_health`)
on the very payload ``/api/v2/monitor/health`` serves. Outages come from Airflow's ``job`` table:
a scheduler is alive from its start until its last heartbeat (a SIGKILLed one keeps state
``running`` forever, so the state is not trusted); the gaps between the union of those spans
that exceed ``scheduler_health_check_threshold`` are outages, and so is a stale last heartbeat.
HA replicas overlap, so one dying while another runs is no outage.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_crashsafe.ui.models import ComponentHealth, Outage
from airflow_crashsafe.watchdog.health import COMPONENTS, parse_health

__all__ = [
    "JobSpan",
    "SchedulerState",
    "component_health",
    "outages",
    "read_scheduler_spans",
    "scheduler_state",
    "threshold",
]


@dataclass(frozen=True)
class JobSpan:
    """When one scheduler job was alive: start to end (clean stop) or last heartbeat."""

    started_at: datetime
    last_alive: datetime


def outages(spans: Iterable[JobSpan], *, now: datetime, since: datetime, grace: timedelta) -> list[Outage]:
    """Windows after ``since`` where no scheduler was alive for longer than ``grace``, oldest first."""
    merged: list[list[datetime]] = []
    for span in sorted(spans, key=lambda s: s.started_at):
        if merged and span.started_at <= merged[-1][1] + grace:
            merged[-1][1] = max(merged[-1][1], span.last_alive)
        else:
            merged.append([span.started_at, span.last_alive])
    found = [
        Outage(started_at=a[1], ended_at=b[0], seconds=(b[0] - a[1]).total_seconds())
        for a, b in itertools.pairwise(merged)
    ]
    if merged and now - merged[-1][1] > grace:
        last = merged[-1][1]
        found.append(
            Outage(started_at=last, ended_at=None, seconds=(now - last).total_seconds(), ongoing=True)
        )
    return [o for o in found if (o.ended_at or now) >= since]


def threshold() -> timedelta:
    """``[scheduler] scheduler_health_check_threshold``: a shorter silence is not an outage."""
    from airflow.configuration import conf

    return timedelta(seconds=conf.getint("scheduler", "scheduler_health_check_threshold", fallback=30))


def read_scheduler_spans(since: datetime) -> list[JobSpan]:
    """Scheduler jobs alive at any time after ``since`` (plus the one before, to see a gap start)."""
    from airflow.jobs.job import Job
    from airflow.utils.session import create_session
    from sqlalchemy import or_, select

    with create_session() as session:
        jobs = session.execute(
            select(Job.start_date, Job.end_date, Job.latest_heartbeat).where(
                Job.job_type == "SchedulerJob",
                or_(Job.latest_heartbeat >= since - timedelta(days=1), Job.start_date >= since),
            )
        ).all()
    spans = []
    for start, end, beat in jobs:
        if start is None:
            continue
        spans.append(JobSpan(_utc(start), _utc(end or beat or start)))
    return spans


def component_health(now: datetime | None = None) -> tuple[bool, list[ComponentHealth]]:
    """``(metadatabase ok, components)`` from Airflow's own health check, as the endpoint reports it."""
    from airflow.api.common.airflow_health import get_airflow_health

    now = now or datetime.now(timezone.utc)
    observation = parse_health(get_airflow_health(), at=now)
    out = []
    for name in COMPONENTS:
        jobs = observation.jobs_of(name)
        if not jobs:
            out.append(ComponentHealth(component=name, status="never_started"))
            continue
        job = jobs[0]
        beat = job.latest_heartbeat
        out.append(
            ComponentHealth(
                component=name,
                status="healthy" if job.reported_healthy else "unhealthy",
                latest_heartbeat=beat,
                heartbeat_age_seconds=round((now - beat).total_seconds(), 1) if beat else None,
            )
        )
    return observation.metadatabase_ok, out


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


class SchedulerState:
    """Health now and outages since a moment: the overview's view of Airflow (a dependency, so
    tests can give the pages a scheduler history without an Airflow metadata database)."""

    def health(self) -> tuple[bool, list[ComponentHealth]]:
        return component_health()

    def outages(self, *, since: datetime, now: datetime) -> list[Outage]:
        return outages(read_scheduler_spans(since), now=now, since=since, grace=threshold())


def scheduler_state() -> SchedulerState:
    """FastAPI dependency: the live Airflow metadata database."""
    return SchedulerState()
