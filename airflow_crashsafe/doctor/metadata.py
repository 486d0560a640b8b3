"""Hazards in the metadata database: no idle-transaction timeout, no live triggerer for adoption.

Both read the database Airflow itself uses (``[database] sql_alchemy_conn``) through the watchdog's
read-only :class:`~airflow_crashsafe.watchdog.db.DbSource`, so they run where Airflow is
configured and need no running scheduler. See docs/design.md, "How Airflow behaves on a crash".
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_crashsafe import config
from airflow_crashsafe.doctor.airflow_settings import metadata_url, number
from airflow_crashsafe.doctor.findings import ERROR, HAZARD, OK, SKIPPED, Finding
from airflow_crashsafe.dsn import safe_db_url
from airflow_crashsafe.watchdog.db import DbSource
from airflow_crashsafe.watchdog.health import is_alive

__all__ = ["check_idle_transaction_timeout", "check_triggerer_for_adoption"]

_TIMEOUT = (
    "SELECT setting, current_database() FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'"
)


def check_idle_transaction_timeout() -> list[Finding]:
    """``idle_in_transaction_session_timeout`` = 0 lets a dead scheduler's transaction wedge the next."""
    name = "metadata_idle_transaction_timeout"
    url = metadata_url()
    source = DbSource(url)
    if source.dialect != "postgresql":
        return [Finding(name, SKIPPED, f"the metadata database is {source.dialect}, not PostgreSQL")]
    try:
        with source.connect() as conn, conn.cursor() as cursor:
            cursor.execute(_TIMEOUT)
            setting, database = cursor.fetchone()
    except Exception as exc:  # libpq may quote the URL's password back: say it without
        reason = f"{type(exc).__name__}: {source.describe_error(exc)}"
        return [Finding(name, ERROR, f"could not check from here: {reason}"[:500])]
    milliseconds = int(setting)
    where = {
        "database": database,
        "url": safe_db_url(url),
        "idle_in_transaction_session_timeout_ms": milliseconds,
    }
    if milliseconds > 0:
        summary = f"idle_in_transaction_session_timeout is {milliseconds / 1000:g} s on {database}"
        return [Finding(name, OK, summary, details=where)]
    return [
        Finding(
            name,
            HAZARD,
            f"idle_in_transaction_session_timeout is 0 (off) on the metadata database {database}: a "
            "scheduler killed inside its critical section leaves a transaction open (its forked "
            "workers keep the socket) and the restarted scheduler never queues a task",
            fix=f"ALTER DATABASE {database} SET idle_in_transaction_session_timeout = '5min'; (or start "
            "PostgreSQL with -c idle_in_transaction_session_timeout=5min), and run the watchdog with "
            "--db-url and --heal",
            details=where,
        )
    ]


def check_triggerer_for_adoption() -> list[Finding]:
    """Adoption defers re-runs to the triggerer: without a live one they never resume."""
    name = "triggerer_for_adoption"
    if not config.adopt_in_flight():
        return [Finding(name, SKIPPED, "[crashsafe] adopt_in_flight is off: nothing defers to the triggerer")]
    threshold = number("triggerer", "triggerer_health_check_threshold", 30.0)
    now = datetime.now(timezone.utc)
    observation = DbSource(metadata_url()).observe(now)
    if observation.error:
        return [Finding(name, ERROR, observation.error)]
    triggerers = observation.jobs_of("triggerer")
    details = {"triggerers": [job.describe() for job in triggerers], "threshold_seconds": threshold}
    if any(is_alive(job, now, threshold) for job in triggerers):
        return [Finding(name, OK, "a triggerer is alive, so adopting re-runs can resume", details=details)]
    seen = "has stopped heartbeating" if triggerers else "has never run"
    return [
        Finding(
            name,
            HAZARD,
            f"[crashsafe] adopt_in_flight is on but the triggerer {seen}: a re-run that defers to "
            "adopt its predecessor's in-flight write never resumes",
            fix="run `airflow triggerer` (keep it supervised), or set [crashsafe] adopt_in_flight = False",
            details=details,
        )
    ]
