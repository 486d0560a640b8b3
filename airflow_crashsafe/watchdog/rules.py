"""The watchdog's rules: what is wrong in one observation of Airflow, and how that pages.

Two steps. :func:`conditions` says what is wrong in one observation (nothing here knows about
time passing). :func:`evaluate` folds that into the incidents with the shared incident engine
(:mod:`airflow_crashsafe.alerting.incidents`: grace, repeat, resolve). When the watchdog cannot
see Airflow (source down, metadata DB unhealthy) only that is known: other incidents are neither
opened nor resolved until it can see again. A dead scheduler's open transaction that blocks its
restarted successor (:mod:`airflow_crashsafe.watchdog.wedge`) is an incident of its own, as is a
session holding the scheduler's locks that is not proven one (see
:mod:`~airflow_crashsafe.watchdog.wedge_alerts`), and the canary's stall says whether such a wedge
is its cause. See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_crashsafe.alerting.incidents import Condition, Incident, advance
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import JobRecord, Observation, is_alive
from airflow_crashsafe.watchdog.wedge_alerts import NO_GRACE_KEYS, stall_cause, wedge_conditions

__all__ = ["EXPECT_CHOICES", "VIEW_KEYS", "Rules", "check_expectation", "conditions", "evaluate", "is_alive"]

EXPECT_CHOICES = ("auto", "yes", "no")
#: Incidents about the watchdog's view itself; decided even when nothing else can be.
VIEW_KEYS = (
    "api_unreachable",
    "db_unreachable",
    "metadatabase_unhealthy",
    "blind_spot:health",
    "blind_spot:db",
)
#: A source refusing the watchdog (HTTP 401/403, a refused DB login): what to check.
_BLIND_SPOT_FIX = {
    "db": "check the --db-url user, its password and its SELECT grant on Airflow's tables",
    "api": "check --api-token-env / --api-user and that user's permissions in Airflow",
}


def check_expectation(name: str, value: str) -> None:
    """Whether a component is expected: ``yes``, ``no`` or ``auto`` (when Airflow reports one)."""
    if value not in EXPECT_CHOICES:
        raise ConfigurationError(f"{name} must be one of {EXPECT_CHOICES}, not {value!r}: pick one of them")


@dataclass(frozen=True)
class Rules:
    """The thresholds. ``threshold`` is Airflow's ``scheduler_health_check_threshold`` (30 s)."""

    threshold: float = 30.0
    #: Extra seconds a condition must last before it pages. 0: a dead scheduler already had
    #: ``threshold`` seconds to come back, so it pages at the first poll past the threshold.
    grace: float = 0.0
    repeat_interval: float = 3600.0
    expect_triggerer: str = "auto"
    expect_dag_processor: str = "auto"
    canary_dag_id: str | None = None
    canary_max_age: float | None = None
    instance: str = "airflow"
    #: Celery queues that must have a live consumer (``--celery-queues``; empty: not watched).
    celery_queues: tuple[str, ...] = ()
    #: How long a queue may have no live consumer before it pages, s.
    worker_threshold: float = 60.0

    def __post_init__(self) -> None:
        check_expectation("expect_triggerer", self.expect_triggerer)
        check_expectation("expect_dag_processor", self.expect_dag_processor)
        if self.threshold <= 0 or self.grace < 0 or self.repeat_interval < 0:
            raise ConfigurationError(
                "threshold must be > 0; grace and repeat_interval >= 0: fix the watchdog's settings"
            )
        if self.canary_dag_id and not self.canary_max_age:
            raise ConfigurationError(
                "a canary DAG needs canary_max_age: give the seconds its newest success may be old"
            )


def _newest_beat(jobs: list[JobRecord]) -> datetime | None:
    beats = [j.latest_heartbeat for j in jobs if j.latest_heartbeat is not None]
    return max(beats) if beats else None


def _running(observation: Observation) -> Any:
    if observation.running_tasks is None:
        return "unknown (needs --db-url or API credentials)"
    return list(observation.running_tasks)


def conditions(observation: Observation, rules: Rules) -> tuple[dict[str, Condition], bool]:
    """What is wrong in one observation, and whether the rest of Airflow could be seen at all."""
    now = observation.at
    found: dict[str, Condition] = {}

    def add(condition: Condition) -> None:
        found[condition.key] = condition

    for name, problem in observation.blind_spots.items():
        # Blind everywhere (health, db) pages; one endpoint refused (jobs, canary, tasks) warns.
        severity = "critical" if name in ("health", "db") else "warning"
        fix = _BLIND_SPOT_FIX["db" if observation.source == "db" else "api"]
        spot = {"source": name, "problem": problem, "fix": fix}
        add(Condition(f"blind_spot:{name}", severity, f"monitoring blind spot: {problem}", now, spot))
    if observation.error is not None and found:
        return found, False  # the blind spot is why nothing could be read: one alert, not two
    if observation.error is not None:
        key = "db_unreachable" if observation.source == "db" else "api_unreachable"
        what = "metadata database" if observation.source == "db" else "api-server"
        summary = f"Airflow {what} unreachable: the watchdog is blind"
        add(Condition(key, "critical", summary, now, {"error": observation.error}))
        return found, False
    if not observation.metadatabase_ok:
        summary = "Airflow metadata database unhealthy (api-server cannot read it)"
        add(Condition("metadatabase_unhealthy", "critical", summary, now, {"notes": list(observation.notes)}))
        return found, False

    schedulers = observation.jobs_of("scheduler")
    alive = [j for j in schedulers if is_alive(j, now, rules.threshold)]
    if not alive:
        dead: dict[str, Any] = {
            "schedulers": [j.describe() for j in schedulers],
            "running_tasks": _running(observation),
        }
        holders = [tx for tx in observation.idle_transactions or () if tx.on_airflow_tables]
        if holders:
            # Not a wedge yet (nothing restarted), but the next scheduler will be blocked by these:
            # who holds what (tables and lock modes, never query text).
            dead["open_transactions"] = [tx.describe() for tx in holders]
        add(
            Condition(
                "scheduler_dead",
                "critical",
                f"Airflow scheduler dead: no heartbeat in {rules.threshold:g} s",
                _newest_beat(schedulers),
                dead,
            )
        )
    else:
        for job in schedulers:
            if job in alive or job.state != "running":
                continue
            ident = job.job_id if job.job_id is not None else job.hostname
            summary = (
                f"Airflow scheduler replica {ident} on {job.hostname} stopped heartbeating (others alive)"
            )
            about = {"replica": job.describe(), "alive": [j.describe() for j in alive]}
            add(Condition(f"scheduler_replica_dead:{ident}", "warning", summary, job.latest_heartbeat, about))
        found.update(wedge_conditions(observation))

    for component, expect in (
        ("triggerer", rules.expect_triggerer),
        ("dag_processor", rules.expect_dag_processor),
    ):
        jobs = observation.jobs_of(component)
        expected = expect == "yes" or (expect == "auto" and observation.exists.get(component, False))
        if expected and not any(is_alive(j, now, rules.threshold) for j in jobs):
            name = component.replace("_", "-")
            summary = f"Airflow {name} dead" if jobs else f"Airflow {name} expected but never started"
            add(
                Condition(
                    f"{component}_dead",
                    "critical",
                    summary,
                    _newest_beat(jobs),
                    {"jobs": [j.describe() for j in jobs]},
                )
            )

    found.update(_worker_pool(observation, rules))

    if rules.canary_dag_id and alive:
        assert rules.canary_max_age is not None
        details: dict[str, Any] = {
            "canary_dag_id": rules.canary_dag_id,
            "max_age_seconds": rules.canary_max_age,
        }
        if not observation.canary_checked:
            if not {"canary", "login"} & set(observation.blind_spots):  # else a blind spot says why
                details["notes"] = list(observation.notes)
                add(Condition("canary_unchecked", "warning", "Canary DAG could not be checked", now, details))
        else:
            last = observation.canary_last_success
            details["last_success"] = last.isoformat() if last else None
            details["running_tasks"] = _running(observation)
            details["cause"], because = stall_cause(observation)
            summary = f"Airflow scheduling stalled: canary {rules.canary_dag_id!r} has no recent success"
            summary += because or ""
            if last is None:
                # Never succeeded: maybe just deployed, so give it one full max age first.
                add(Condition("scheduling_stalled", "critical", summary, now, details, rules.canary_max_age))
            elif (now - last).total_seconds() > rules.canary_max_age:
                add(Condition("scheduling_stalled", "critical", summary, last, details))
    return found, True


def _worker_pool(observation: Observation, rules: Rules) -> dict[str, Condition]:
    """A watched Celery queue that no live worker consumes (for ``worker_threshold``) pages."""
    now, found = observation.at, dict[str, Condition]()
    if not rules.celery_queues:
        return found
    if observation.broker_error is not None:
        summary = "Celery broker unreachable: the worker pool cannot be seen"
        found["celery_broker_unreachable"] = Condition(
            "celery_broker_unreachable", "critical", summary, now, {"error": observation.broker_error}
        )
        return found
    consumers = observation.queue_consumers
    if consumers is None:
        return found
    for queue in rules.celery_queues:
        if consumers.get(queue):
            continue
        key = f"celery_queue_unserved:{queue}"
        summary = f"no live Celery worker consumes queue {queue!r}: its tasks stay queued"
        details = {"queue": queue, "workers": {q: list(w) for q, w in consumers.items()}}
        found[key] = Condition(key, "critical", summary, now, details, rules.worker_threshold)
    return found


def evaluate(
    incidents: Mapping[str, Incident], observation: Observation, rules: Rules
) -> tuple[dict[str, Incident], list[Alert]]:
    """Fold one observation into the incidents; return the new incidents and the alerts to send.

    While the watchdog is blind (``seen`` False) only the incidents about its view are judged. A
    wedge, and a session holding the scheduler's locks, page without the grace: their idle
    threshold already is one, and ``--heal`` may end a wedge in the poll that finds it, so the
    page must go out in that poll to say what was done.
    """
    active, seen = conditions(observation, rules)
    result: dict[str, Incident] = {}
    alerts: list[Alert] = []
    for wedge, grace in ((False, rules.grace), (True, 0.0)):
        part, raised = advance(
            {k: v for k, v in incidents.items() if k.startswith(NO_GRACE_KEYS) == wedge},
            {k: v for k, v in active.items() if k.startswith(NO_GRACE_KEYS) == wedge},
            observation.at,
            grace=grace,
            repeat_interval=rules.repeat_interval,
            instance=rules.instance,
            judged=lambda key: seen or key in VIEW_KEYS,
        )
        result.update(part)
        alerts += raised
    return result, alerts
