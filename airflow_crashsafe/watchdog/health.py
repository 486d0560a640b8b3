"""What the watchdog sees, as a plain :class:`Observation`, and how it is read from the api-server.

``GET /api/v2/monitor/health`` needs no auth and always answers 200, even when everything is
down: the verdict is in the body (``scheduler.status`` and ``latest_scheduler_heartbeat``; the
triggerer's and dag-processor's ``status`` is ``null`` when no such job ever ran). It reports only
the most recent job of each kind, so HA replicas, the canary DAG and the running tasks need the
authenticated REST API (a token, or user and password for ``/auth/token``); without credentials
those parts are simply not observed. Reading never raises: a failure becomes an observation
with ``error`` set, which the rules turn into an alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_crashsafe.watchdog.runs import DagRuns
    from airflow_crashsafe.watchdog.wedge import IdleTransaction

__all__ = [
    "COMPONENTS",
    "JOB_TYPES",
    "HealthFormatError",
    "JobRecord",
    "Observation",
    "is_alive",
    "parse_health",
    "parse_timestamp",
]

COMPONENTS = ("scheduler", "triggerer", "dag_processor")
JOB_TYPES = {"scheduler": "SchedulerJob", "triggerer": "TriggererJob", "dag_processor": "DagProcessorJob"}
COMPONENT_OF_JOB_TYPE = {v: k for k, v in JOB_TYPES.items()}


class HealthFormatError(ValueError):
    """The health body is not what Airflow 3's ``HealthInfoResponse`` looks like."""


@dataclass(frozen=True)
class JobRecord:
    """One Airflow job (a scheduler, triggerer or dag-processor process) as last recorded.

    ``state`` is the ``job`` row's state when known (DB and jobs list); ``reported_healthy`` is
    Airflow's own verdict when it came from the health endpoint. Either being negative means dead.
    """

    component: str
    latest_heartbeat: datetime | None
    state: str | None = None
    reported_healthy: bool | None = None
    job_id: int | None = None
    hostname: str | None = None
    #: When the job started (the ``job`` row's ``start_date``), where it was read.
    start_date: datetime | None = None

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly summary for alert details."""
        beat = self.latest_heartbeat.isoformat() if self.latest_heartbeat else None
        out: dict[str, Any] = {"component": self.component, "latest_heartbeat": beat}
        if self.start_date is not None:
            out["start_date"] = self.start_date.isoformat()
        for key in ("job_id", "hostname", "state", "reported_healthy"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class Observation:
    """Everything one poll learned. With ``error`` set nothing else is known.

    :param exists: per component, whether Airflow has any job of that kind at all (False means
        "never started", which only matters when the component is expected).
    :param canary_last_success: end of the canary DAG's newest successful run, when checked.
    :param running_tasks: task instances running or queued at this moment, when readable.
    :param notes: parts that could not be read (e.g. the jobs list without credentials).
    :param idle_transactions: metadata-DB sessions idle in a transaction past the wedge threshold
        while holding locks on the scheduler's tables, each with the verdict on its owner (see
        :mod:`airflow_crashsafe.watchdog.wedge`); None when not looked at (no ``--db-url`` on
        PostgreSQL).
    :param blind_spots: per source (``health``, ``jobs``, ``canary``, ``task_instances``, ``db``),
        why it refused the watchdog (HTTP 401/403, a refused database login). Each is an alert of
        its own: a wrong token must not switch part of the monitoring off without a word.
    :param deadline_dags: per DAG with a deadline, its runs, dependencies and durations; None
        when not read (no ``[[deadlines]]``, or the API without credentials).
    :param queue_consumers: per Celery queue, the live workers consuming it (``--celery-broker-url``,
        :mod:`airflow_crashsafe.watchdog.celery_workers`); None when not asked.
    :param broker_error: why the Celery broker could not be asked, when it could not.
    """

    at: datetime
    source: str
    error: str | None = None
    metadatabase_ok: bool = True
    jobs: tuple[JobRecord, ...] = ()
    exists: Mapping[str, bool] = field(default_factory=dict)
    canary_checked: bool = False
    canary_last_success: datetime | None = None
    running_tasks: tuple[str, ...] | None = None
    notes: tuple[str, ...] = ()
    idle_transactions: tuple[IdleTransaction, ...] | None = None
    blind_spots: Mapping[str, str] = field(default_factory=dict)
    deadline_dags: Mapping[str, DagRuns] | None = None
    queue_consumers: Mapping[str, tuple[str, ...]] | None = None
    broker_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def jobs_of(self, component: str) -> list[JobRecord]:
        return [job for job in self.jobs if job.component == component]


def is_alive(job: JobRecord, now: datetime, threshold: float) -> bool:
    """Alive = running (by state or Airflow's verdict) and a heartbeat fresher than ``threshold``.

    A heartbeat in the future (clock skew) counts as fresh.
    """
    if job.latest_heartbeat is None or job.reported_healthy is False:
        return False
    if job.state is not None and job.state != "running":
        return False
    return (now - job.latest_heartbeat).total_seconds() < threshold


def parse_timestamp(value: Any) -> datetime | None:
    """ISO 8601 (``T`` or space separated; naive means UTC, as Airflow stores it in SQLite)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        parsed = datetime.fromisoformat(text)
    else:
        raise HealthFormatError(f"timestamp must be a string, got {type(value).__name__}")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _part(payload: Mapping[str, Any], name: str, required: bool) -> Mapping[str, Any] | None:
    part = payload.get(name)
    if part is None and not required:
        return None
    if not isinstance(part, Mapping) or "status" not in part:
        raise HealthFormatError(f"'{name}' must be an object with a 'status' field, got {part!r:.80}")
    status = part["status"]
    if status not in ("healthy", "unhealthy", None):
        raise HealthFormatError(f"'{name}.status' must be 'healthy', 'unhealthy' or null, not {status!r:.40}")
    return part


def parse_health(payload: Any, at: datetime) -> Observation:
    """Turn the health endpoint's JSON into an Observation, or raise :class:`HealthFormatError`.

    The metadatabase and scheduler parts are required (Airflow always sends them); a missing
    triggerer or dag_processor part counts as "no such job".
    """
    if not isinstance(payload, Mapping):
        raise HealthFormatError(f"the health body must be a JSON object, got {type(payload).__name__}")
    database = _part(payload, "metadatabase", required=True)
    assert database is not None
    jobs: list[JobRecord] = []
    exists: dict[str, bool] = {}
    for component in COMPONENTS:
        part = _part(payload, component, required=component == "scheduler")
        if part is None:
            exists[component] = False
            continue
        try:
            beat = parse_timestamp(part.get(f"latest_{component}_heartbeat"))
        except ValueError as exc:
            raise HealthFormatError(f"'{component}.latest_{component}_heartbeat': {exc}") from None
        status = part["status"]
        exists[component] = status is not None and (component != "scheduler" or beat is not None)
        if exists[component]:
            jobs.append(JobRecord(component, beat, reported_healthy=status == "healthy"))
    return Observation(
        at=at,
        source="api",
        metadatabase_ok=database["status"] == "healthy",
        jobs=tuple(jobs),
        exists=exists,
    )
