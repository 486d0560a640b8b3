"""Fault injection on delivery: dripping, silent and failing sinks, a malformed outbox, hostile text."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.alerting import (
    Alert,
    Dispatcher,
    EmailSink,
    FileOutbox,
    SinkError,
    SlackSink,
    WebhookSink,
    build_sinks,
    verify_signature,
)
from airflow_crashsafe.alerting.sinks import sign_body
from airflow_crashsafe.errors import ConfigurationError
from tests.support.faulty import drip, faulty, silent
from tests.support.httpserver import Reply, serve

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)
OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


def _alert(key: str = "dk", summary: str = "scheduler dead") -> Alert:
    return Alert(key, "trigger", "critical", summary, "prod", T0, T0)


def test_dripping_sink_is_abandoned_at_its_deadline(tmp_path: Path) -> None:
    """A sink answering one byte every 2 s fails after its deadline; the alert stays spooled."""
    with faulty(drip(OK_RESPONSE, every=2.0)) as sink_server:
        sink = WebhookSink(sink_server.url + "/h", timeout=10, deadline=1.5, retries=0)
        dispatcher = Dispatcher([sink], outbox=FileOutbox(tmp_path / "o.jsonl"))
        started = time.monotonic()
        report = dispatcher.submit(_alert())
        took = time.monotonic() - started
        assert sink_server.hung_up.wait(8), "the abandoned connection was never closed"
    assert took < 6, f"delivery took {took:.1f} s despite a 1.5 s deadline"
    assert report.pending == 1
    assert "deadline" in report.failed[0][3]
    _no_lingering_attempt()


def _no_lingering_attempt() -> None:
    """Every abandoned attempt's thread has ended: its connection was cut, not left to drip."""
    for _ in range(50):
        lingering = [t.name for t in threading.enumerate() if t.name.startswith("crashsafe-send-")]
        if not lingering:
            return
        time.sleep(0.1)
    raise AssertionError(f"abandoned attempts still running: {lingering}")


def test_dripping_error_body_is_read_only_until_the_deadline() -> None:
    """A 500 whose body drips is a SinkError within the deadline, not after the whole body."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 4000\r\nConnection: close\r\n\r\n")
        drip(b"x" * 4000, every=0.5)(conn, stop)

    with faulty(answer) as srv:
        sink = WebhookSink(srv.url + "/h", timeout=10, deadline=2, retries=0)
        started = time.monotonic()
        with pytest.raises(SinkError, match="HTTP 500"):
            sink.send(_alert())
    assert time.monotonic() - started < 6


def test_silent_sink_is_abandoned_at_its_deadline() -> None:
    """A sink that accepts and never answers costs one deadline, not its 30 s read timeout."""
    with faulty(silent) as sink_server:
        sink = WebhookSink(sink_server.url + "/h", timeout=30, deadline=1, retries=1)
        dispatcher = Dispatcher([sink], retry_delay=0.1)
        started = time.monotonic()
        report = dispatcher.submit(_alert())
        assert sink_server.hung_up.wait(5), "the abandoned connection was never closed"
    assert time.monotonic() - started < 8
    assert "deadline" in report.failed[0][3]
    assert len(sink_server.requests) == 2  # first try and one retry, each abandoned
    _no_lingering_attempt()


def test_failing_sink_beside_a_healthy_one_does_not_delay_it() -> None:
    """While a 500-ing sink retries in the background, the healthy sink has already received."""
    with serve(lambda _r: Reply(500, "down")) as bad, serve() as good:
        sinks = build_sinks(
            [
                {"type": "webhook", "name": "bad", "url": bad.url + "/h", "retries": 3},
                {"type": "webhook", "name": "good", "url": good.url + "/h"},
            ]
        )
        dispatcher = Dispatcher(sinks, retry_delay=1.0)
        dispatcher.enqueue(_alert())
        started = time.monotonic()
        dispatcher.start()
        while not good.requests and time.monotonic() - started < 5:
            time.sleep(0.02)
        received_after = time.monotonic() - started
        assert dispatcher.busy() == ["bad"]  # still retrying (1 + 2 + 4 s of back-off)
        assert dispatcher.close(timeout=3)  # close cuts the retry pause short
    assert received_after < 1.0
    assert [r.json()["dedup_key"] for r in good.requests] == ["dk"]


def test_malformed_outbox_lines_are_quarantined_and_the_rest_delivered(tmp_path: Path) -> None:
    """No "alert", bad JSON, wrong types, a bad event: each moved aside; good entries still go out."""
    path = tmp_path / "o.jsonl"
    good: dict[str, Any] = {
        "id": "a1",
        "sink": "hook",
        "alert": _alert("good").to_dict(),
        "attempts": 0,
        "queued_at": time.time(),
        "next_try_at": 0,
    }
    bad_lines = [
        json.dumps({**good, "id": "b1", "alert": None}),
        json.dumps({k: v for k, v in good.items() if k != "alert"}),
        "{not json",
        json.dumps({**good, "id": "b2", "attempts": "3"}),
        json.dumps({**good, "id": "b3", "alert": {**good["alert"], "event": "explode"}}),
        json.dumps(["a", "list"]),
    ]
    path.write_text("\n".join([*bad_lines, json.dumps(good)]) + "\n")
    with serve() as hook:
        (sink,) = build_sinks([{"type": "webhook", "name": "hook", "url": hook.url + "/h"}])
        dispatcher = Dispatcher([sink], outbox=FileOutbox(path))
        first = dispatcher.deliver()
        second = dispatcher.submit(_alert("later"))
    assert first.delivered == [("hook", "good", "trigger")]
    assert second.delivered == [("hook", "later", "trigger")]
    assert [r.json()["dedup_key"] for r in hook.requests] == ["good", "later"]
    quarantined = (tmp_path / "o.jsonl.quarantine").read_text().splitlines()
    assert quarantined == bad_lines
    assert path.read_text() == ""


def test_slack_text_is_escaped_so_nobody_is_pinged() -> None:
    """`<!channel>` or `<@U1>` in Airflow data reaches Slack as text (&lt;...&gt;), never a mention."""
    with serve() as slack:
        SlackSink(slack.url + "/services/T/B/x").send(_alert(summary="partition <!channel> & <@U1|x>"))
    text = slack.requests[0].json()["text"]
    assert "&lt;!channel&gt; &amp; &lt;@U1|x&gt;" in text
    assert "<!" not in text
    assert "<@" not in text


@pytest.mark.parametrize("timestamp", ["nan", "NaN", "inf", "-inf", "infinity"])
def test_signature_with_a_non_finite_timestamp_is_rejected(timestamp: str) -> None:
    """A correctly signed body with a nan/inf timestamp is refused: it would dodge the replay window."""
    body = b'{"x": 1}'
    assert not verify_signature("s", body, timestamp, sign_body("s", body, timestamp), now=1000.0)
    assert verify_signature("s", body, "1000", sign_body("s", body, "1000"), now=1000.0)


@pytest.mark.parametrize("deadline", [0, -1, "soon", float("nan")])
def test_bad_deadline_is_a_configuration_error(deadline: object) -> None:
    """A deadline that is not a positive number is refused naming the sink."""
    with pytest.raises(ConfigurationError, match="sink #1"):
        build_sinks([{"type": "webhook", "url": "http://x/h", "deadline": deadline}])


def test_silent_smtp_server_is_abandoned_at_the_deadline() -> None:
    """An SMTP server that accepts and never greets costs one deadline, not its 30 s timeout."""
    with faulty(silent) as smtp:
        port = int(smtp.url.rsplit(":", 1)[1])
        sink = EmailSink(
            host="127.0.0.1", port=port, sender="a@x", recipients=["b@x"], timeout=30, deadline=1, retries=0
        )
        started = time.monotonic()
        report = Dispatcher([sink]).submit(_alert())
        took = time.monotonic() - started
        assert smtp.hung_up.wait(5), "the abandoned SMTP connection was never closed"
    assert took < 5
    assert "deadline" in report.failed[0][3]
    _no_lingering_attempt()
