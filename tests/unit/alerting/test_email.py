"""The SMTP sink against a real local SMTP server (aiosmtpd)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import datetime, timezone
from email import message_from_bytes
from typing import Any

import pytest

from airflow_crashsafe.alerting import Alert, EmailSink, SinkError

controller_mod = pytest.importorskip("aiosmtpd.controller", reason="test dependency aiosmtpd==1.4.6 missing")

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


class _Collect:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope)
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[int, _Collect]]:
    """A real SMTP server on 127.0.0.1 collecting every message."""
    handler = _Collect()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    controller = controller_mod.Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, handler
    finally:
        controller.stop()


def test_email_delivers_subject_body_and_recipients(smtp: tuple[int, _Collect]) -> None:
    """The mail reaches every recipient with the alert title as subject and details in the body."""
    port, handler = smtp
    alert = Alert("dk", "trigger", "critical", "scheduler dead", "prod", T0, T0, {"job": 7})
    EmailSink(host="127.0.0.1", port=port, sender="wd@example.org", recipients=["a@x.org", "b@x.org"]).send(
        alert
    )
    envelope = handler.messages[0]
    assert sorted(envelope.rcpt_tos) == ["a@x.org", "b@x.org"]
    message = message_from_bytes(envelope.content)
    assert message["Subject"] == alert.title
    assert "job: 7" in message.get_payload()


def test_email_to_closed_port_raises_sink_error() -> None:
    """No SMTP server listening is a SinkError, not a crash."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    alert = Alert("dk", "trigger", "critical", "x", "prod", T0, T0)
    with pytest.raises(SinkError):
        EmailSink(
            host="127.0.0.1", port=port, sender="a@x", recipients=["b@x"], timeout=1, password="pw"
        ).send(alert)
