"""The alerting DAG's last step: defer for a second and come back through the triggerer.

A triggerer can heartbeat and still run no trigger (stalled in its event loop): the health
endpoint then calls it healthy, yet every deferred task waits forever, a waiting re-run's
adoption among them. This step is the canary's proof that triggers run: it defers on a
ten-second timer, and the run succeeds only when a triggerer fires it. A stalled (or missing)
triggerer makes the deferral time out and the run fail, and the watchdog's canary rule ("no
successful run of the canary for ``--canary-max-age``") pages (docs/design.md, "Watchdog and
alerting").

With ``expect_triggerer="no"`` the step returns at once; with ``"auto"`` it defers only when the
api-server reports a triggerer ever ran (an unreadable health defers: the heartbeat check alerts
about that anyway).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_crashsafe.dags.alerting import AlertingSettings

__all__ = ["ROUND_TRIP_TIMEOUT", "ROUND_TRIP_WAIT", "TriggererRoundTrip"]

log = logging.getLogger(__name__)

#: How long the step defers: the triggerer's timer fires after it. Not shorter: Airflow 3.3's
#: scheduler fails a resumed try (same try number) when the process that deferred it exits only
#: after the resumed one started (its "success" then reads as a state changed externally); on a
#: loaded worker that exit took 5 s.
ROUND_TRIP_WAIT = timedelta(seconds=10)
#: How long the deferral may go unanswered before the step (and the canary's run) fails.
ROUND_TRIP_TIMEOUT = timedelta(minutes=2)


class TriggererRoundTrip(BaseOperator):
    """Defer for :data:`ROUND_TRIP_WAIT` and resume: succeeds only when a triggerer runs triggers."""

    ui_color = "#fff4e0"

    def __init__(self, *, settings: AlertingSettings, **kwargs: Any) -> None:
        kwargs.setdefault("execution_timeout", ROUND_TRIP_TIMEOUT + timedelta(minutes=1))
        super().__init__(**kwargs)
        self.settings = settings

    def execute(self, context: Context) -> str:
        """Defer on a short timer, unless no triggerer is expected."""
        from airflow.providers.standard.triggers.temporal import DateTimeTrigger

        reason = self._no_triggerer_expected()
        if reason:
            log.info("crashsafe: no triggerer round trip: %s.", reason)
            return "skipped"
        log.info(
            "crashsafe: deferring for %s: the run succeeds only if a triggerer fires it.", ROUND_TRIP_WAIT
        )
        self.defer(
            trigger=DateTimeTrigger(moment=datetime.now(timezone.utc) + ROUND_TRIP_WAIT),
            method_name="came_back",
            timeout=ROUND_TRIP_TIMEOUT,
        )
        raise AssertionError("defer() returned")  # pragma: no cover - defer always raises

    def came_back(self, context: Context, event: Any = None) -> str:
        """Resumed by the triggerer's event: triggers run."""
        log.info("crashsafe: the triggerer fired the round trip's trigger.")
        return "ok"

    def _no_triggerer_expected(self) -> str | None:
        """Why no round trip is wanted, or None to defer."""
        expect = self.settings.expect_triggerer
        if expect == "yes":
            return None
        if expect == "no":
            return "expect_triggerer='no'"
        from airflow_crashsafe.sensors.heartbeat import read_health

        health, _ = self.settings.api()
        observation = read_health(health.base_url, timeout=self.settings.request_timeout)
        if observation.error is None and not observation.exists.get("triggerer", False):
            return "expect_triggerer='auto' and the api-server reports no triggerer ever ran"
        return None
