"""Catch what reaches Airflow's metrics, through Airflow's own hook for choosing the backend.

``Stats.initialize(factory=...)`` is how every Airflow process installs its StatsD, Datadog or
OpenTelemetry logger; :func:`record_metrics` installs a logger that keeps what it is sent, so a
test sees exactly what a real backend would (after Airflow's name handling), with no patching.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MetricsRecorder", "Sent", "configured_stats_factory", "initialize_stats", "record_metrics"]


@dataclass(frozen=True)
class Sent:
    """One metric as the backend received it: ``kind`` is incr, decr, gauge or timing."""

    kind: str
    name: str
    value: float
    tags: dict[str, Any] = field(default_factory=dict)


class MetricsRecorder:
    """A metrics backend (Airflow's ``StatsLogger`` protocol) that keeps every metric it is sent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: list[Sent] = []

    def _keep(self, kind: str, name: str, value: float, tags: dict[str, Any] | None) -> None:
        with self._lock:
            self._sent.append(Sent(kind, name, float(value), dict(tags or {})))

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self._keep("incr", stat, count, tags)

    def decr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self._keep("decr", stat, count, tags)

    def gauge(
        self,
        stat: str,
        value: float,
        rate: float = 1,
        delta: bool = False,
        *,
        tags: dict[str, Any] | None = None,
    ) -> None:
        self._keep("gauge", stat, value, tags)

    def timing(self, stat: str, dt: Any, *, tags: dict[str, Any] | None = None) -> None:
        ms = dt.total_seconds() * 1000.0 if hasattr(dt, "total_seconds") else dt
        self._keep("timing", stat, ms, tags)

    def timer(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("crashsafe sends timings, not timers")

    @property
    def sent(self) -> list[Sent]:
        with self._lock:
            return list(self._sent)

    def named(self, prefix: str = "crashsafe.") -> list[Sent]:
        """What was sent under names starting with ``prefix``, in order."""
        return [s for s in self.sent if s.name.startswith(prefix)]

    def count(self, name: str, **tags: Any) -> float:
        """The sum of increments of counter ``name`` whose tags include ``tags``."""
        return sum(
            s.value
            for s in self.sent
            if s.kind == "incr" and s.name == name and all(s.tags.get(k) == v for k, v in tags.items())
        )


def initialize_stats(factory: Any, legacy_names: bool = False) -> None:
    """``Stats.initialize(factory=...)`` on every supported Airflow: 3.3 also takes (and needs)
    ``export_legacy_names``; 3.2's has no such parameter (and no legacy names to export)."""
    import inspect

    from airflow.sdk.observability.stats import Stats

    if "export_legacy_names" in inspect.signature(Stats.initialize).parameters:
        Stats.initialize(factory=factory, export_legacy_names=legacy_names)
    else:
        Stats.initialize(factory=factory)  # type: ignore[call-arg]


def configured_stats_factory() -> Any:
    """The backend factory ``[metrics]`` configures, as a task process gets it (3.2's lookup takes
    the ``Stats`` class, for Datadog's; 3.3's takes nothing)."""
    import inspect

    from airflow.sdk.observability.metrics.stats_utils import get_stats_factory
    from airflow.sdk.observability.stats import Stats

    if inspect.signature(get_stats_factory).parameters:
        return get_stats_factory(Stats)  # type: ignore[call-arg]
    return get_stats_factory()


@contextlib.contextmanager
def record_metrics() -> Iterator[MetricsRecorder]:
    """Install a :class:`MetricsRecorder` as the task SDK's metrics backend for the block.

    Afterwards the backend is the one ``[metrics]`` configures, as in a task process.
    """
    from airflow.sdk.configuration import conf

    recorder = MetricsRecorder()

    def factory() -> Any:  # Airflow's StatsLogger protocol is spelt with classmethods
        return recorder

    initialize_stats(factory)
    try:
        yield recorder
    finally:
        legacy = conf.getboolean("metrics", "legacy_names_on", fallback=True)
        initialize_stats(configured_stats_factory(), legacy)
