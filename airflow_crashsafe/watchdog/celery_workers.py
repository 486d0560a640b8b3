"""The Celery worker pool as the broker sees it: which live workers consume which queue.

Airflow never reports a dead worker pool: tasks sit ``queued`` while the scheduler heartbeats and
the health endpoint says all is well. With ``--celery-broker-url`` the watchdog asks the workers
themselves, through the broker (Celery's remote control ``active_queues`` broadcast, answered by
every live worker within ``timeout``), and a queue nobody consumes for longer than
``--worker-threshold`` pages. Celery (and through it kombu and the broker's client library, e.g.
``redis``) is imported only when this is asked for, and never Airflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.dsn import mask_dsn_text
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import Observation

if TYPE_CHECKING:
    from airflow_crashsafe.watchdog.loop import Source
    from airflow_crashsafe.watchdog.runs import RunReader

__all__ = ["CeleryQueues", "CelerySource"]


class CeleryQueues:
    """Asks the broker's live workers which queues they consume."""

    def __init__(self, broker_url: str, *, timeout: float = 5.0) -> None:
        try:
            from celery import Celery  # type: ignore[import-untyped]
        except ImportError:
            raise ConfigurationError(
                "--celery-broker-url needs the celery package (pip install celery, plus redis for a "
                "Redis broker), or drop the option"
            ) from None
        self.app = Celery("crashsafe-watchdog", broker=broker_url, set_as_current=False)
        self.timeout = timeout

    def consumers(self) -> dict[str, tuple[str, ...]]:
        """Queue name -> the Celery node names of the live workers consuming it."""
        replies: Mapping[str, Any] = self.app.control.inspect(timeout=self.timeout).active_queues() or {}
        found: dict[str, list[str]] = {}
        for worker, queues in replies.items():
            for queue in queues or []:
                found.setdefault(str(queue.get("name")), []).append(str(worker))
        return {name: tuple(sorted(workers)) for name, workers in found.items()}

    def close(self) -> None:
        self.app.close()


class CelerySource:
    """Another source's observation, plus the worker pool (or why the broker could not be asked)."""

    def __init__(self, inner: Source, queues: CeleryQueues) -> None:
        self.inner = inner
        self.queues = queues
        self.source = inner.source

    @property
    def runs(self) -> RunReader | None:
        return self.inner.runs

    @runs.setter
    def runs(self, value: RunReader | None) -> None:
        self.inner.runs = value

    @property
    def target(self) -> str:
        return self.inner.target

    def observe(self, now: datetime) -> Observation:
        observation = self.inner.observe(now)
        try:
            consumers = self.queues.consumers()
        except Exception as exc:  # a broker outage is an observation, never a crash of the watchdog
            error = mask_dsn_text(f"{type(exc).__name__}: {exc}")  # a broker URL's password, if quoted
            return dataclasses.replace(observation, broker_error=error)
        return dataclasses.replace(observation, queue_consumers=consumers)
