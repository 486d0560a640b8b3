"""Counters, timers and a gauge sent through Airflow's own metrics (StatsD, Datadog, OpenTelemetry).

Airflow configures the backend from ``[metrics]`` (``statsd_on``, ``statsd_host``, ``otel_on``, ...)
in every process that runs task code, so crashsafe's numbers arrive where the scheduler's already
go, under Airflow's ``statsd_prefix``. The names are listed in :data:`METRICS` and in
``docs/observability.md``; each carries ``dag_id`` and ``task_id`` tags where a task is known
(sent by the DogStatsD and OpenTelemetry backends, and by StatsD with ``statsd_influxdb_enabled``).

Sending a metric never fails or slows the write: an error is logged at debug level and dropped.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["METRICS", "gauge", "incr", "slot_tags", "timed", "timing"]

log = logging.getLogger(__name__)

#: Every metric crashsafe sends: name -> (type, what it counts).
METRICS: Mapping[str, tuple[str, str]] = {
    "crashsafe.fence.committed": ("counter", "a fenced write committed"),
    "crashsafe.fence.rejected": ("counter", "a stale attempt was fenced out (tag stage: start or commit)"),
    "crashsafe.fence.skipped_committed": ("counter", "an attempt found its slot committed and did no work"),
    "crashsafe.fence.adopted": ("counter", "an attempt adopted the commit of an earlier attempt's unit"),
    "crashsafe.fence.took_over": ("counter", "an attempt took the slot over from a stale unit"),
    "crashsafe.fence.write": ("timer", "how long a fenced write ran, in ms (successful writes)"),
    "crashsafe.ledger.replayed": ("counter", "a ledgered call replayed a recorded success, sending nothing"),
    "crashsafe.ledger.adopted": ("counter", "a ledgered call adopted an earlier attempt's in-flight call"),
    "crashsafe.ledger.in_flight_wait": ("timer", "how long a call awaited an earlier attempt's, in ms"),
    "crashsafe.ledger.unknown_outcome": ("counter", "a call raised mid-flight: its outcome is unknown"),
    "crashsafe.ledger.unknown_outcome_found": (
        "counter",
        "an attempt found an earlier attempt's outcome unknown (tag action: refused or resent)",
    ),
    "crashsafe.audit.spooled": (
        "counter",
        "audit events spooled locally because the store did not take them",
    ),
    "crashsafe.audit.spool_depth": ("gauge", "audit events waiting in this machine's spool"),
}


def _stats() -> Any:
    """Airflow's ``Stats`` for task code (the task SDK's; imported late so no import pulls Airflow in)."""
    from airflow.sdk.observability.stats import Stats

    return Stats


def _send(method: str, name: str, *args: Any, tags: Mapping[str, Any] | None) -> None:
    if name not in METRICS:
        raise ValueError(f"{name!r} is not a crashsafe metric; add it to METRICS and docs/observability.md")
    try:
        getattr(_stats(), method)(name, *args, tags=dict(tags) if tags else None)
    except Exception:
        log.debug("crashsafe: could not send metric %s", name, exc_info=True)


def slot_tags(slot: Any, **extra: Any) -> dict[str, Any]:
    """``dag_id`` and ``task_id`` of a :class:`~airflow_crashsafe.identity.Slot`, plus ``extra``."""
    return {"dag_id": slot.dag_id, "task_id": slot.task_id, **extra}


def incr(name: str, count: int = 1, *, tags: Mapping[str, Any] | None = None) -> None:
    """Add ``count`` to counter ``name``."""
    _send("incr", name, count, tags=tags)


def gauge(name: str, value: float, *, tags: Mapping[str, Any] | None = None) -> None:
    """Set gauge ``name`` to ``value``."""
    _send("gauge", name, value, tags=tags)


def timing(name: str, milliseconds: float, *, tags: Mapping[str, Any] | None = None) -> None:
    """Record one duration of timer ``name``."""
    _send("timing", name, milliseconds, tags=tags)


@contextlib.contextmanager
def timed(name: str, *, tags: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Time the block as ``name``, only when it ends normally (a deferral or an error is not a write)."""
    start = time.monotonic()
    yield
    timing(name, (time.monotonic() - start) * 1000.0, tags=tags)
