"""HTTP sinks against a real local server: bodies, signatures, PagerDuty actions, secret hygiene."""

from __future__ import annotations

import socket
from datetime import datetime, timezone

import pytest

from airflow_crashsafe.alerting import (
    Alert,
    PagerDutySink,
    SinkError,
    SlackSink,
    WebhookSink,
    verify_signature,
)
from tests.support.httpserver import Reply, serve

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def _alert(event: str = "trigger", severity: str = "critical") -> Alert:
    return Alert("dk-1", event, severity, "scheduler dead", "prod", T0, T0, {"running_tasks": ["d.t[-1]"]})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_webhook_posts_alert_json_with_valid_hmac() -> None:
    """The webhook body is the alert's dict and its signature verifies with the shared secret."""
    with serve() as server:
        WebhookSink(server.url + "/hook", hmac_secret="s3cret", clock=lambda: 1000.0).send(_alert())
    request = server.requests[0]
    assert request.json()["dedup_key"] == "dk-1"
    assert request.json()["details"] == {"running_tasks": ["d.t[-1]"]}
    ts, sig = request.headers["X-Crashsafe-Timestamp"], request.headers["X-Crashsafe-Signature"]
    assert verify_signature("s3cret", request.body, ts, sig, now=1000.0)
    assert not verify_signature("wrong", request.body, ts, sig, now=1000.0)
    assert not verify_signature("s3cret", request.body, ts, sig, now=5000.0)


def test_slack_sends_one_text_message() -> None:
    """Slack gets a single mrkdwn text naming the incident and when it began."""
    with serve() as server:
        SlackSink(server.url + "/services/T/B/X").send(_alert())
    text = server.requests[0].json()["text"]
    assert "scheduler dead" in text
    assert "2026-01-01T03:00:00+00:00" in text


def test_pagerduty_trigger_and_resolve_share_the_dedup_key() -> None:
    """Trigger carries a payload; resolve carries only the routing and dedup keys."""
    with serve(lambda _r: Reply(202, {"status": "success"})) as server:
        sink = PagerDutySink("rk-123", url=server.url + "/v2/enqueue")
        sink.send(_alert("trigger"))
        sink.send(_alert("resolve", "critical"))
    trigger, resolve = (r.json() for r in server.requests)
    assert trigger["event_action"] == "trigger"
    assert trigger["payload"]["severity"] == "critical"
    assert resolve == {"routing_key": "rk-123", "event_action": "resolve", "dedup_key": "dk-1"}


def test_http_error_raises_sink_error_without_the_token() -> None:
    """A 500 is a SinkError, and the webhook URL's token path never appears in its message."""
    with (
        serve(lambda _r: Reply(500, "boom at /services/T/B/TOKEN")) as server,
        pytest.raises(SinkError) as err,
    ):
        SlackSink(server.url + "/services/T/B/TOKEN").send(_alert())
    assert "HTTP 500" in str(err.value)
    assert "TOKEN" not in str(err.value)


def test_connection_refused_is_redacted() -> None:
    """A refused connection names the error type but not the secret URL path."""
    sink = WebhookSink(f"http://127.0.0.1:{_free_port()}/hook/SECRET-TOKEN", timeout=1, hmac_secret="k")
    with pytest.raises(SinkError) as err:
        sink.send(_alert())
    assert "ConnectionError" in str(err.value)
    assert "SECRET-TOKEN" not in str(err.value)
