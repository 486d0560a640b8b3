"""``SchedulerHeartbeatSensor``: a gate before heavy work that waits until Airflow's components live.

A heavy task started while the scheduler is dead runs to its end, but nothing after it is
scheduled, and a scheduler that comes back later than its health-check threshold resets it and
runs it again (docs/design.md, "How Airflow behaves on a crash"). Gating on fresh heartbeats
narrows that window.

Task code cannot use the ORM, so health comes from the api-server's unauthenticated
``/api/v2/monitor/health``, read and judged by the watchdog's own code
(:mod:`airflow_crashsafe.watchdog.api`, :func:`airflow_crashsafe.watchdog.rules.is_alive`): a
component is alive when Airflow reports it healthy *and* its newest heartbeat is younger than
``threshold_seconds``. The endpoint applies Airflow's own thresholds (30 s by default) first, so a
``threshold_seconds`` above those cannot make a component alive that Airflow calls unhealthy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import COMPONENTS, Observation
from airflow_crashsafe.watchdog.settings import LIMITS as WATCH_LIMITS

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["SchedulerHeartbeatSensor", "normalize_components", "read_health", "stale_components"]

_ALIASES = {"dag-processor": "dag_processor", "dagprocessor": "dag_processor"}


def normalize_components(components: str | Iterable[str]) -> tuple[str, ...]:
    """``("scheduler", "dag-processor")`` or ``"scheduler,triggerer"`` -> canonical names.

    Raises :class:`~airflow_crashsafe.errors.ConfigurationError` naming the unknown component and
    the valid choices.
    """
    items = components.split(",") if isinstance(components, str) else list(components)
    names: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigurationError(
                f"components must be names out of {', '.join(COMPONENTS)}, got {item!r}: list component names"
            )
        name = _ALIASES.get(item.strip().lower(), item.strip().lower())
        if name not in COMPONENTS:
            raise ConfigurationError(
                f"unknown component {item!r}: choose from {', '.join(COMPONENTS)} (or 'dag-processor')"
            )
        if name not in names:
            names.append(name)
    if not names:
        raise ConfigurationError(
            f"components must name at least one of {', '.join(COMPONENTS)}: name what to wait for"
        )
    return tuple(names)


def _threshold(value: Any) -> float:
    """The watchdog's heartbeat threshold limit: an infinite one would call any heartbeat alive."""
    return WATCH_LIMITS["threshold"].check(value, "threshold_seconds", example=30)


def read_health(
    api_url: str,
    *,
    timeout: float = 10.0,
    now: datetime | None = None,
    token: str | None = None,
    username: str | None = None,
    password: str | None = None,
) -> Observation:
    """One read of the api-server's health (and, with credentials, its jobs list); never raises
    for a network or format problem: that becomes ``observation.error``."""
    from airflow_crashsafe.watchdog.api import ApiSource

    source = ApiSource(api_url, timeout=timeout, token=token, username=username, password=password)
    return source.observe(now or datetime.now(timezone.utc))


def stale_components(observation: Observation, components: Sequence[str], threshold: float) -> dict[str, str]:
    """Component -> why it is not alive (empty when every one of ``components`` is)."""
    from airflow_crashsafe.watchdog.rules import is_alive

    if observation.error is not None:
        return dict.fromkeys(components, f"health unknown: {observation.error}")
    problems: dict[str, str] = {}
    if not observation.metadatabase_ok:
        problems["metadatabase"] = "the api-server reports the metadata database unhealthy"
    for component in components:
        jobs = observation.jobs_of(component)
        if any(is_alive(job, observation.at, threshold) for job in jobs):
            continue
        beats = [job.latest_heartbeat for job in jobs if job.latest_heartbeat is not None]
        if not beats:
            problems[component] = "no such job has ever heartbeated"
            continue
        age = (observation.at - max(beats)).total_seconds()
        verdict = "reported unhealthy" if any(j.reported_healthy is False for j in jobs) else "stale"
        problems[component] = f"{verdict}: newest heartbeat {age:.0f} s ago (threshold {threshold:g} s)"
    return problems


class SchedulerHeartbeatSensor(BaseSensorOperator):
    """Wait until the scheduler (and optionally the triggerer and dag-processor) heartbeat freshly.

    Put it in front of work that is expensive to run twice: it succeeds only while the listed
    components are alive, so the work starts when a scheduler is there to finish the run.
    Use ``mode="reschedule"`` for long waits, like any sensor.

    :param threshold_seconds: a heartbeat older than this means not alive (templated).
    :param components: which of ``scheduler``, ``triggerer``, ``dag_processor`` (also
        ``dag-processor``) must be alive; a comma-separated string is accepted (templated).
    :param api_url: the api-server's root URL (templated). Default: ``[crashsafe] api_url``, else
        the root of ``[core] execution_api_server_url``, else ``[api] base_url``, else
        ``http://localhost:8080``.
    :param request_timeout: seconds one read of the health endpoint may take.
    """

    template_fields: Sequence[str] = ("threshold_seconds", "components", "api_url")
    ui_color = "#f0e4ec"

    def __init__(
        self,
        *,
        threshold_seconds: float | str = 30,
        components: str | Sequence[str] = ("scheduler",),
        api_url: str | None = None,
        request_timeout: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        # Check what is already final now (a DAG with a typo fails at parse time); templated
        # values are checked again after rendering, in poke().
        if not _templated(components):
            normalize_components(components)
        if not _templated(threshold_seconds):
            _threshold(threshold_seconds)
        self.threshold_seconds = threshold_seconds
        self.components = components
        self.api_url = api_url
        self.request_timeout = request_timeout

    def poke(self, context: Context) -> bool:
        """True when every listed component is alive; False (poke again) otherwise."""
        components = normalize_components(self.components)
        threshold = _threshold(self.threshold_seconds)
        url = config.api_url(self.api_url)
        observation = read_health(url, timeout=self.request_timeout)
        problems = stale_components(observation, components, threshold)
        if problems:
            self.log.info(
                "Waiting for %s at %s: %s",
                ", ".join(components),
                url,
                "; ".join(f"{name} {why}" for name, why in problems.items()),
            )
            return False
        self.log.info("%s alive at %s (heartbeats within %g s)", ", ".join(components), url, threshold)
        return True


def _templated(value: Any) -> bool:
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return False
    if isinstance(value, Iterable):
        return any(_templated(item) for item in value)
    return False
