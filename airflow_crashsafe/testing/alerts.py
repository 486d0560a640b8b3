"""A sink that keeps what it is sent, to test alerting without a webhook, Slack or mail server."""

from __future__ import annotations

import threading

from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.alerting.sinks import Sink

__all__ = ["RecordingSink"]


class RecordingSink(Sink):
    """Records every alert delivered to it, in order; pass it to a ``Dispatcher`` like any sink."""

    kind = "recording"

    def __init__(self, name: str = "recording") -> None:
        super().__init__(name=name)
        self.alerts: list[Alert] = []
        self._lock = threading.Lock()  # sinks deliver from background workers

    def send(self, alert: Alert) -> None:
        with self._lock:
            self.alerts.append(alert)
