"""The poll loop: observe, decide, remember, deliver; stop cleanly on SIGTERM.

Order inside one poll is chosen for crash safety: alerts are spooled to the outbox first, the
incident state is saved second, delivery comes last. A watchdog killed anywhere in between
re-sends at most (at-least-once), and never forgets an alert it decided to send.

In :meth:`Watchdog.run` delivery happens off the loop, on the dispatcher's per-sink workers: a
sink that answers slowly or never delays no poll and no other sink. SIGTERM stops the loop at
once and gives the workers a bounded moment (``stop_timeout``); what they had not delivered stays
in the outbox for the next start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol

from airflow_crashsafe.alerting.dispatch import Dispatcher
from airflow_crashsafe.alerting.incidents import Incident
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.watchdog.health import Observation
from airflow_crashsafe.watchdog.metrics import MetricsServer, Poll
from airflow_crashsafe.watchdog.rules import Rules, evaluate
from airflow_crashsafe.watchdog.state import StateFile

if TYPE_CHECKING:
    from airflow_crashsafe.watchdog.deadline_watch import DeadlineWatch
    from airflow_crashsafe.watchdog.runs import RunReader

__all__ = ["Source", "Watchdog", "utcnow"]

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Source(Protocol):
    """Where observations come from: :class:`ApiSource` or :class:`DbSource`."""

    source: str
    #: Reads the runs of DAGs with a deadline, when ``[[deadlines]]`` are configured.
    runs: RunReader | None

    @property
    def target(self) -> str: ...

    def observe(self, now: datetime) -> Observation: ...


class Watchdog:
    """One watchdog: a source, the rules, a dispatcher and a state file."""

    def __init__(
        self,
        source: Source,
        rules: Rules,
        dispatcher: Dispatcher,
        state: StateFile,
        *,
        clock: Callable[[], datetime] = utcnow,
        metrics: MetricsServer | None = None,
        deadlines: DeadlineWatch | None = None,
    ) -> None:
        self.source, self.rules, self.dispatcher, self.state = source, rules, dispatcher, state
        self._clock = clock
        self.metrics = metrics
        self.deadlines = deadlines
        self.incidents: dict[str, Incident] = state.load()
        self.last_observation: Observation | None = None
        if self.incidents:
            log.info("resuming with %d incident(s) from %s", len(self.incidents), state.path)

    def tick(self, *, wait: bool = True) -> list[Alert]:
        """One poll. Returns the alerts it raised, already spooled.

        With ``wait`` delivery is attempted before returning (each attempt bounded by its sink's
        deadline); without, it is started in the background and the poll returns at once.
        """
        observation = self.source.observe(self._clock())
        self.last_observation = observation
        if observation.error:
            log.warning("poll of %s failed: %s", self.source.target, observation.error)
        for note in observation.notes:
            log.info("poll of %s: %s", self.source.target, note)
        deadline_keys = {k for k in self.incidents if self.deadlines is not None and self.deadlines.owns(k)}
        others = {k: v for k, v in self.incidents.items() if k not in deadline_keys}
        incidents, alerts = evaluate(others, observation, self.rules)
        for alert in alerts:
            self.dispatcher.enqueue(alert)
        if self.deadlines is not None:  # spooled by the deadline watch: once among replicas
            mine = {k: self.incidents[k] for k in deadline_keys}
            part, sent = self.deadlines.evaluate(mine, observation, self.dispatcher.enqueue)
            incidents.update(part)
            alerts += sent
        self.state.save(incidents)
        self.incidents = incidents
        if wait:
            pending = self.dispatcher.deliver().pending
        else:
            self.dispatcher.start()
            pending = self.dispatcher.pending()
        if self.metrics is not None:
            self.metrics.update(
                Poll(observation, incidents, self.rules, pending, dict(self.dispatcher.failures_total))
            )
        return alerts

    def run(self, stop: threading.Event, interval: float, *, stop_timeout: float = 2.0) -> None:
        """Poll every ``interval`` seconds until ``stop`` is set (by the SIGTERM handler).

        Deliveries run in the background; on stop they get ``stop_timeout`` seconds to finish.
        """
        log.info("watching %s every %g s", self.source.target, interval)
        try:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self.tick(wait=False)
                except Exception:  # keep watching: a watchdog that dies on a bug watches nothing
                    log.exception("watchdog poll failed unexpectedly; retrying at the next interval")
                stop.wait(max(0.0, interval - (time.monotonic() - started)))
        finally:
            self.dispatcher.close(stop_timeout)
        log.info("watchdog stopped")
