"""Airflow Notifiers as alert sinks of the alerting DAG, beside the watchdog's ``[[sinks]]``.

A deployment that already sends mail through an ``smtp`` connection, or posts to Slack or
PagerDuty through their providers' connections, can page with the same parts:
``build_alerting_dag(notifiers=[SmtpNotifier(to="ops@example.com", smtp_conn_id="smtp_ops")])``,
or ``[crashsafe] alert_notifiers`` naming the Notifier classes and their arguments (connection ids
included) as JSON, for the DAG built with no arguments. Only the DAG can: the watchdog runs
without Airflow and keeps its own sinks.

Each alert renders a fresh copy of the notifier (rendering mutates it) with a context holding
``alert`` (the :class:`~airflow_crashsafe.alerting.Alert`: ``{{ alert.title }}``,
``{{ alert.summary }}``, ``{{ alert.details }}``) and ``alert_text`` (the full text the other
sinks send); a message field left unset (SMTP's ``subject`` / ``html_content``, ``text``,
``summary``, ``message``) gets the alert's title or text, since the providers' default templates
describe a failed task instance that an alert does not have. A notifier that raises is a failed
delivery: the dispatcher retries it and keeps it in the outbox like any sink's.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from airflow_crashsafe.alerting import Alert, Sink, SinkError
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["NotifierSink", "notifier_sinks"]

# Message fields the providers' notifiers leave to templates about a task instance.
_DEFAULTS = {
    "subject": "{{ alert.title }}",
    "html_content": "<pre>{{ alert_text | e }}</pre>",
    "text": "{{ alert.title }}\n{{ alert_text }}",
    "summary": "{{ alert.title }}",
    "message": "{{ alert_text }}",
}


class NotifierSink(Sink):
    """Delivers alerts through an Airflow ``BaseNotifier`` (``notify(context)``)."""

    kind = "notifier"

    def __init__(self, notifier: Any, **kwargs: Any) -> None:
        from airflow.sdk import BaseNotifier

        if not isinstance(notifier, BaseNotifier):
            raise ConfigurationError(
                f"{notifier!r} is not an Airflow Notifier (a BaseNotifier instance, e.g. "
                "SmtpNotifier(to=..., smtp_conn_id=...)): pass one, or a [[sinks]] table instead."
            )
        kwargs.setdefault("name", type(notifier).__name__)
        super().__init__(**kwargs)
        self.notifier = notifier

    def send(self, alert: Alert) -> None:
        notifier = copy.deepcopy(self.notifier)
        for field, template in _DEFAULTS.items():
            if field in notifier.template_fields and getattr(notifier, field, None) is None:
                setattr(notifier, field, template)
        context: Any = {"alert": alert, "alert_text": alert.text()}  # what a template may use
        try:
            notifier.render_template_fields(context)
            notifier.notify(context)
        except Exception as exc:
            raise SinkError(f"{type(exc).__name__} from notifier sink {self.name!r}: {exc}") from None


def notifier_sinks(notifiers: Sequence[Any] = (), spec: str | None = None) -> list[Sink]:
    """Sinks for ``notifiers`` (Notifier instances, or ready :class:`NotifierSink`) and a JSON ``spec``.

    ``spec`` (``[crashsafe] alert_notifiers``) is a JSON list of objects: ``class`` (the Notifier's
    import path), ``kwargs`` (its arguments), and optionally ``name``, ``min_severity``,
    ``timeout``, ``retries``, ``deadline``. A sink is named after its class unless named; the
    outbox keys its retries by that name.
    """
    sinks: list[Sink] = [n if isinstance(n, Sink) else NotifierSink(n) for n in notifiers]
    if spec:
        sinks += [_from_entry(entry, i) for i, entry in enumerate(_entries(spec))]
    seen: dict[str, int] = {}
    for sink in sinks:  # two notifiers of one class: SmtpNotifier, SmtpNotifier-2 (stable, by order)
        seen[sink.name] = seen.get(sink.name, 0) + 1
        if seen[sink.name] > 1:
            sink.name = f"{sink.name}-{seen[sink.name]}"
    return sinks


def _entries(spec: str) -> list[dict[str, Any]]:
    example = (
        '[{"class": "airflow.providers.smtp.notifications.smtp.SmtpNotifier", '
        '"kwargs": {"to": "ops@example.com"}}]'
    )
    try:
        entries = json.loads(spec)
    except ValueError as exc:
        raise ConfigurationError(
            f"[crashsafe] alert_notifiers is not JSON ({exc}); write e.g. {example}"
        ) from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigurationError(
            f"[crashsafe] alert_notifiers must be a JSON list of objects, e.g. {example}"
        )
    return entries


def _from_entry(entry: dict[str, Any], index: int) -> NotifierSink:
    from airflow.sdk.module_loading import import_string

    where = f"[crashsafe] alert_notifiers entry {index}"
    unknown = set(entry) - {"class", "kwargs", "name", "min_severity", "timeout", "retries", "deadline"}
    if unknown or not isinstance(entry.get("class"), str) or not isinstance(entry.get("kwargs", {}), dict):
        raise ConfigurationError(
            f"{where} needs 'class' (a Notifier's import path) and may have 'kwargs' (an object), "
            f"'name', 'min_severity', 'timeout', 'retries', 'deadline'; got keys {sorted(entry)}."
        )
    try:
        cls = import_string(entry["class"])
    except ImportError as exc:
        raise ConfigurationError(
            f"{where}: cannot import {entry['class']!r} ({exc}); install its provider or fix the path."
        ) from None
    try:
        notifier = cls(**entry.get("kwargs", {}))
    except TypeError as exc:
        raise ConfigurationError(f"{where}: {entry['class']} does not take these kwargs: {exc}") from None
    options = {k: entry[k] for k in ("name", "min_severity", "timeout", "retries", "deadline") if k in entry}
    return NotifierSink(notifier, **options)
