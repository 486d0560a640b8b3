"""Where alerts go: a generic JSON webhook, Slack, PagerDuty Events v2 and SMTP email.

Each sink makes one delivery attempt per :meth:`Sink.send` and raises :class:`SinkError` on any
failure; retrying, timing out the whole fan-out and spooling are the dispatcher's job, so a sink
stays a few lines of protocol. Secrets (webhook URLs carry tokens, routing keys, passwords) are
held privately and scrubbed out of every error message, because those messages get logged.

Plain ``requests`` and ``smtplib`` are used on purpose: each protocol here is one request, and
the vendor SDKs (slack_sdk, pagerduty) would add dependencies without removing any code we need.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import smtplib
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from email.message import EmailMessage
from typing import Any, ClassVar

import requests

from airflow_crashsafe.alerting import transport
from airflow_crashsafe.alerting.model import SEVERITIES, Alert, severity_rank
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.limits import HOUR, Limit

__all__ = [
    "PAGERDUTY_EVENTS_URL",
    "EmailSink",
    "PagerDutySink",
    "Sink",
    "SinkError",
    "SlackSink",
    "WebhookSink",
    "sign_body",
    "slack_escape",
    "verify_signature",
]

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SIGNATURE_HEADER = "X-Crashsafe-Signature"
TIMESTAMP_HEADER = "X-Crashsafe-Timestamp"
_REDACTED = "***"
#: Default wall-clock bound of one delivery attempt, however slowly the sink answers (s).
DEFAULT_DEADLINE = 30.0
#: What a sink's numbers may be, from a ``[[sinks]]`` table or a constructor: a nan or infinite
#: timeout or deadline would let one sink hold every delivery, unbounded retries would never end.
TIMEOUT_LIMIT = Limit(0, HOUR, above=True)
DEADLINE_LIMIT = Limit(0, HOUR, above=True)
RETRIES_LIMIT = Limit(0, 100, integer=True, unit="retries")
PORT_LIMIT = Limit(1, 65535, integer=True, unit="")
#: How much of an error answer's body is read (and quoted) at most.
_SNIPPET_BYTES = 200


class SinkError(Exception):
    """One delivery attempt failed; the message is already free of secrets."""


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret (longest first, so a URL goes before its parts) with ``***``."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    return text


def _url_secrets(url: str) -> list[str]:
    """A webhook URL's path and query are its token: hide them, keep the host for diagnosis."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    return [url, tail] if tail not in ("", "/") else [url]


def sign_body(secret: str, body: bytes, timestamp: str) -> str:
    """HMAC-SHA256 over ``timestamp + "." + body``, as sent in ``X-Crashsafe-Signature``."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(
    secret: str,
    body: bytes,
    timestamp: str,
    signature: str,
    *,
    max_age: float = 300.0,
    now: float | None = None,
) -> bool:
    """For receivers: check a webhook's signature and refuse replays older than ``max_age`` s."""
    try:
        sent_at = float(timestamp)
    except ValueError:
        return False
    if not math.isfinite(sent_at):  # "nan" would pass every comparison below
        return False
    age = (time.time() if now is None else now) - sent_at
    if not abs(age) <= max_age:
        return False
    return hmac.compare_digest(sign_body(secret, body, timestamp), signature)


class Sink(ABC):
    """One configured destination.

    ``timeout`` bounds each network wait of an attempt (connect, one read); ``deadline`` bounds the
    whole attempt on the wall clock, however slowly the far end drips its answer (the dispatcher
    abandons an attempt past it); ``retries`` extra attempts follow a failure. ``label`` is how
    configuration errors name the sink (default ``sink '<name>'``; a config file's entry says which).
    """

    kind = "sink"

    def __init__(
        self,
        *,
        name: str | None = None,
        timeout: float = 10.0,
        retries: int = 2,
        min_severity: str = "info",
        deadline: float = DEFAULT_DEADLINE,
        label: str | None = None,
    ) -> None:
        self.name = name or self.kind
        self._label = label or f"sink {self.name!r}"
        if min_severity not in SEVERITIES:
            raise ConfigurationError(
                f"{self._label}: min_severity must be one of {SEVERITIES}, not {min_severity!r}: "
                "pick one of them"
            )
        self.timeout = TIMEOUT_LIMIT.check(timeout, f"{self._label}: timeout", example=10)
        self.retries = RETRIES_LIMIT.check_int(retries, f"{self._label}: retries", example=2)
        self.min_severity = min_severity
        self.deadline = DEADLINE_LIMIT.check(deadline, f"{self._label}: deadline", example=DEFAULT_DEADLINE)

    def accepts(self, alert: Alert) -> bool:
        """Whether this sink wants this alert (by severity)."""
        return severity_rank(alert.severity) >= severity_rank(self.min_severity)

    @abstractmethod
    def send(self, alert: Alert) -> None:
        """Deliver once, or raise :class:`SinkError`."""

    def _secrets(self) -> Sequence[str]:
        return ()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class _HttpSink(Sink):
    """Shared POST-JSON-and-check-status for the HTTP sinks."""

    def __init__(self, url: str, *, session: requests.Session | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"{self._label}: URL must start with http:// or https://: give the endpoint's full URL"
            )
        self._url = url
        self._session = session or transport.closable_session()

    def _secrets(self) -> Sequence[str]:
        return _url_secrets(self._url)

    def _post(self, body: bytes, headers: Mapping[str, str]) -> None:
        """POST and check the status. The body is streamed and read only on an error, a few bytes
        at a time against the deadline, so a sink dripping its answer cannot hold the attempt."""
        all_headers = {
            "Content-Type": "application/json",
            "User-Agent": "airflow-crashsafe-watchdog",
            "Connection": "close",  # a fresh, tracked connection per attempt: one to cut if abandoned
        }
        all_headers.update(headers)
        ends_at = time.monotonic() + self.deadline
        try:
            response = self._session.post(
                self._url, data=body, headers=all_headers, timeout=self.timeout, stream=True
            )
        except requests.RequestException as exc:
            raise SinkError(redact(f"{type(exc).__name__}: {exc}", self._secrets())) from None
        with response:
            if 200 <= response.status_code < 300:
                return
            snippet = bytearray()
            try:
                for chunk in response.iter_content(chunk_size=1):
                    snippet += chunk
                    if len(snippet) >= _SNIPPET_BYTES or time.monotonic() > ends_at:
                        break
            except requests.RequestException:
                pass  # the status already says it failed; the body was only for the message
        text = redact(snippet.decode("utf-8", "replace"), self._secrets())
        raise SinkError(f"HTTP {response.status_code} from {self.kind} sink {self.name!r}: {text}")


class WebhookSink(_HttpSink):
    """POSTs :meth:`Alert.to_dict` as JSON; signs it with HMAC-SHA256 when a secret is given."""

    kind = "webhook"

    def __init__(
        self,
        url: str,
        *,
        hmac_secret: str | None = None,
        headers: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, **kwargs)
        self._hmac_secret = hmac_secret
        self._headers = dict(headers or {})
        self._clock = clock

    def _secrets(self) -> Sequence[str]:
        extra = [self._hmac_secret] if self._hmac_secret else []
        return [*super()._secrets(), *extra, *self._headers.values()]

    def send(self, alert: Alert) -> None:
        body = json.dumps(alert.to_dict(), sort_keys=True).encode()
        headers = dict(self._headers)
        if self._hmac_secret:
            timestamp = str(int(self._clock()))
            headers[TIMESTAMP_HEADER] = timestamp
            headers[SIGNATURE_HEADER] = sign_body(self._hmac_secret, body, timestamp)
        self._post(body, headers)


def slack_escape(text: str) -> str:
    """Escape ``&``, ``<`` and ``>`` as Slack asks, so text from Airflow (a DAG id, a partition,
    an error) can never become a mention such as ``<!channel>`` or a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackSink(_HttpSink):
    """A Slack incoming webhook: one ``text`` message (mrkdwn), every part of it escaped."""

    kind = "slack"
    _ICONS: ClassVar[dict[str, str]] = {
        "trigger": ":rotating_light:",
        "repeat": ":warning:",
        "resolve": ":white_check_mark:",
    }

    def send(self, alert: Alert) -> None:
        title, _, rest = slack_escape(alert.text()).partition("\n")
        text = f"{self._ICONS[alert.event]} *{title}*\n```{rest}```"
        self._post(json.dumps({"text": text}).encode(), {})


class PagerDutySink(_HttpSink):
    """PagerDuty Events API v2: ``trigger`` (also for repeats, which PagerDuty de-duplicates) and
    ``resolve``, tied together by the alert's ``dedup_key``."""

    kind = "pagerduty"

    def __init__(self, routing_key: str, *, url: str = PAGERDUTY_EVENTS_URL, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        if not routing_key:
            raise ConfigurationError(
                f"{self._label}: PagerDuty needs a routing key: give the integration key of an "
                "Events API v2 service"
            )
        self._routing_key = routing_key

    def _secrets(self) -> Sequence[str]:
        return [self._routing_key]  # the events URL itself is public

    def send(self, alert: Alert) -> None:
        body: dict[str, Any] = {
            "routing_key": self._routing_key,
            "event_action": "resolve" if alert.event == "resolve" else "trigger",
            "dedup_key": alert.dedup_key[:255],
        }
        if alert.event != "resolve":
            body["payload"] = {
                "summary": alert.summary[:1024],
                "source": alert.source,
                "severity": alert.severity,
                "timestamp": alert.to_dict()["at"],
                "component": "airflow",
                "custom_details": {"began_at": alert.to_dict()["began_at"], **alert.to_dict()["details"]},
            }
        self._post(json.dumps(body).encode(), {})


class EmailSink(Sink):
    """Plain-text email through SMTP (optionally implicit TLS or STARTTLS, optionally logged in).

    TLS verifies the server's certificate and host name with the system's CA bundle. For a test
    server with a self-signed certificate say ``tls_insecure_skip_verify=True`` (or give its CA in
    ``tls_ca_file``). A password never crosses the network in clear: ``username`` without ``ssl``
    or ``starttls`` is refused unless ``allow_plaintext_login=True``.
    """

    kind = "email"

    def __init__(
        self,
        *,
        host: str,
        sender: str,
        recipients: Sequence[str],
        port: int = 25,
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        use_ssl: bool = False,
        tls_insecure_skip_verify: bool = False,
        tls_ca_file: str | None = None,
        allow_plaintext_login: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not recipients:
            raise ConfigurationError(f"{self._label}: email needs at least one recipient: list them in 'to'")
        if username and not (starttls or use_ssl) and not allow_plaintext_login:
            raise ConfigurationError(
                f"{self._label}: 'username' without 'ssl' or 'starttls' would send the password "
                "in clear: set ssl = true or starttls = true (or allow_plaintext_login = true for a "
                "test server)"
            )
        if starttls and use_ssl:
            raise ConfigurationError(f"{self._label}: give 'ssl' or 'starttls', not both")
        self._host, self._port = host, PORT_LIMIT.check_int(port, f"{self._label}: port", example=587)
        self._sender, self._recipients = sender, list(recipients)
        self._username, self._password = username, password
        self._starttls, self._use_ssl = starttls, use_ssl
        self._context = self._tls_context(tls_insecure_skip_verify, tls_ca_file)

    def _tls_context(self, skip_verify: bool, ca_file: str | None) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"{self._label}: cannot read tls_ca_file {ca_file!r}: {exc}") from None
        if skip_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def _secrets(self) -> Sequence[str]:
        return [self._password] if self._password else []

    def _message(self, alert: Alert) -> EmailMessage:
        message = EmailMessage()
        message["Subject"] = alert.title
        message["From"] = self._sender
        message["To"] = ", ".join(self._recipients)
        message["X-Crashsafe-Dedup-Key"] = alert.dedup_key
        message.set_content(alert.text())
        return message

    def send(self, alert: Alert) -> None:
        timeout = min(self.timeout, self.deadline)
        try:
            smtp: smtplib.SMTP
            if self._use_ssl:
                smtp = transport.SMTP_SSL(self._host, self._port, timeout=timeout, context=self._context)
            else:
                smtp = transport.SMTP(self._host, self._port, timeout=timeout)
            with smtp:
                if self._starttls:
                    smtp.starttls(context=self._context)
                    transport.remember(smtp.sock)  # the TLS socket replaced the plain one
                if self._username:
                    smtp.login(self._username, self._password or "")
                smtp.send_message(self._message(alert))
        except (OSError, smtplib.SMTPException) as exc:
            raise SinkError(redact(f"{type(exc).__name__}: {exc}", self._secrets())) from None
