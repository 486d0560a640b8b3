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

Incident-aware notifiers (PagerDuty's: ``severity``, ``dedup_key``, ``action``, ``custom_details``)
follow the incident: unset, ``severity`` is the alert's and ``dedup_key`` its incident key, so a
repeat or a retried delivery updates one incident instead of opening another; ``custom_details``
is the alert as JSON; and the alert that resolves the incident is sent with ``action="resolve"``
when the notifier says ``trigger`` (its default). A failure's message is scrubbed of the secrets of
the notifier's connections (and of anything else :mod:`airflow_crashsafe.redaction` recognises)
before it is logged or kept in the outbox.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from airflow_crashsafe.alerting import Alert, Sink, SinkError
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.redaction import DEFAULT_POLICY

__all__ = ["NotifierSink", "notifier_sinks"]

# Message fields the providers' notifiers leave to templates about a task instance.
_DEFAULTS = {
    "subject": "{{ alert.title }}",
    "html_content": "<pre>{{ alert_text | e }}</pre>",
    "text": "{{ alert_text }}",  # its first line is the title
    "summary": "{{ alert.title }}",
    "message": "{{ alert_text }}",
    "severity": "{{ alert.severity }}",
    "dedup_key": "{{ alert.dedup_key[:255] }}",
}
#: Notifier attributes holding a credential themselves, beside their connections' passwords.
_SECRET_ATTRIBUTES = ("integration_key", "routing_key", "token", "webhook_token", "password")


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
            _follow_incident(notifier, alert)
            notifier.notify(context)
        except Exception as exc:
            message = f"{type(exc).__name__} from notifier sink {self.name!r}: {exc}"
            raise SinkError(DEFAULT_POLICY.knowing(*_secrets(notifier)).text(message)) from None


def _follow_incident(notifier: Any, alert: Alert) -> None:
    """Values no template can give: the alert as a details table, and resolve on resolve."""
    fields = notifier.template_fields
    if "custom_details" in fields and getattr(notifier, "custom_details", None) is None:
        notifier.custom_details = alert.to_dict()  # set after rendering: details are data, not templates
    if {"action", "dedup_key"} <= set(fields) and alert.event == "resolve" and notifier.action == "trigger":
        notifier.action = "resolve"


def _secrets(notifier: Any) -> list[Any]:
    """What the notifier authenticates with: its connections' passwords and extras, its own keys."""
    from airflow.sdk import BaseHook

    found: list[Any] = []
    for name, value in vars(notifier).items():
        if not isinstance(value, str) or not value:
            continue
        if name in _SECRET_ATTRIBUTES:
            found.append(value)
        elif name.endswith("conn_id"):
            try:
                conn = BaseHook.get_connection(value)
            except Exception:  # a missing connection is the failure being reported: nothing to hide
                continue
            password = conn.password or ""
            found += [password, urlsplit(password).path if "://" in password else "", conn.extra_dejson]
    return found


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
