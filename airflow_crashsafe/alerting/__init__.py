"""Alert sinks usable anywhere: the watchdog, the audit inside Airflow, or your own code.

Imports no Airflow. Typical use::

    from airflow_crashsafe.alerting import Alert, Dispatcher, FileOutbox, build_sinks

    dispatcher = Dispatcher(build_sinks(config["sinks"]), outbox=FileOutbox("/var/lib/x/outbox.jsonl"))
    dispatcher.submit(alert)   # spools, then delivers; failures stay spooled
    dispatcher.deliver()       # call again later to retry what is still pending

Alerts themselves are built by one incident engine, :mod:`airflow_crashsafe.alerting.incidents`
(grace, repeat, resolve), shared by the watchdog, the alerting DAG and the audit.
"""

from __future__ import annotations

from airflow_crashsafe.alerting.config import build_sink, build_sinks, load_config_file
from airflow_crashsafe.alerting.dispatch import DeliveryReport, Dispatcher
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.alerting.outbox import FileOutbox, MemoryOutbox, Outbox
from airflow_crashsafe.alerting.sinks import (
    EmailSink,
    PagerDutySink,
    Sink,
    SinkError,
    SlackSink,
    WebhookSink,
    verify_signature,
)

__all__ = [
    "Alert",
    "DeliveryReport",
    "Dispatcher",
    "EmailSink",
    "FileOutbox",
    "MemoryOutbox",
    "Outbox",
    "PagerDutySink",
    "Sink",
    "SinkError",
    "SlackSink",
    "WebhookSink",
    "build_sink",
    "build_sinks",
    "load_config_file",
    "verify_signature",
]
