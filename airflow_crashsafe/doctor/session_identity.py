"""Whether the live schedulers' metadata sessions carry the identity ``watch --heal`` proves a wedge by.

The plugin's listener (:mod:`airflow_crashsafe.component_identity.listener`) names every session
a scheduler opens on its metadata database ``airflow-scheduler job=<id> pid=<pid> host=<host>``.
Without it — the package missing from the scheduler's environment, plugins not loaded, a proxy
that rewrites ``application_name`` — the watchdog can never prove a session is a dead
scheduler's, so it pages every wedge for a person instead of ending it. This check reads
``pg_stat_activity`` (``application_name`` is visible for every role's sessions) for a while,
because a scheduler without a connection pool holds no session between its queries; with no
live scheduler it cannot tell. See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from airflow_crashsafe.component_identity.name import parse
from airflow_crashsafe.doctor.airflow_settings import metadata_url, number
from airflow_crashsafe.doctor.findings import ERROR, HAZARD, OK, SKIPPED, Finding
from airflow_crashsafe.watchdog import pg_sessions
from airflow_crashsafe.watchdog.db import DbSource, safe_db_url
from airflow_crashsafe.watchdog.health import JobRecord, is_alive

__all__ = ["SAMPLE_SECONDS", "check_scheduler_session_identity"]

#: How long ``pg_stat_activity`` is sampled for a live scheduler's named session.
SAMPLE_SECONDS = 3.0
_NAME = "scheduler_session_identity"


def _unnamed(live: list[JobRecord], names: dict[str, int]) -> list[JobRecord]:
    """The live schedulers none of whose sessions carries their identity."""
    identities = [identity for identity in map(parse, names) if identity is not None]
    return [
        job
        for job in live
        if not any(
            i.component == "scheduler" and i.job_id == job.job_id and i.host_matches(job.hostname)
            for i in identities
        )
    ]


def check_scheduler_session_identity() -> list[Finding]:
    """Each live scheduler has a metadata session named after it, or --heal cannot prove its wedge."""
    url = metadata_url()
    source = DbSource(url)
    if source.dialect != "postgresql":
        return [
            Finding(_NAME, SKIPPED, f"the metadata database is {source.dialect}: --heal needs PostgreSQL")
        ]
    threshold = number("scheduler", "scheduler_health_check_threshold", 30.0)
    deadline = time.monotonic() + SAMPLE_SECONDS
    with source.connect() as conn:
        while True:
            now = datetime.now(timezone.utc)
            jobs = pg_sessions.scheduler_jobs(conn, now - timedelta(seconds=threshold))
            live = [job for job in jobs if is_alive(job, now, threshold)]
            names = pg_sessions.session_names(conn)
            missing = _unnamed(live, names)
            if not live or not missing or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
    details = {
        "url": safe_db_url(url),
        "live_schedulers": [job.describe() for job in live],
        "application_names": dict(list(names.items())[:20]),
    }
    if not live:
        return [
            Finding(
                _NAME,
                ERROR,
                "cannot tell whether the scheduler's metadata sessions carry the identity --heal needs: "
                "no scheduler is alive now (run the doctor again while one runs)",
                details=details,
            )
        ]
    if not missing:
        ids = ", ".join(str(job.job_id) for job in live)
        return [
            Finding(_NAME, OK, f"the live scheduler(s) {ids} name their metadata sessions", details=details)
        ]
    named = ", ".join(f"job {job.job_id} on {job.hostname}" for job in missing)
    return [
        Finding(
            _NAME,
            HAZARD,
            f"no metadata session of live scheduler {named} carries its identity "
            "(application_name 'airflow-scheduler job=<id> pid=<pid> host=<host>'): watch --heal "
            "can never prove its wedge and pages it for a person instead of ending it",
            fix="install airflow-crashsafe in the scheduler's environment (the same version as here) "
            "and restart the scheduler; `airflow plugins` there must list crashsafe. A proxy or pooler "
            "between the scheduler and PostgreSQL must keep each session's application_name",
            details=details,
        )
    ]
