"""Airflow Notifiers as the alerting DAG's sinks: SmtpNotifier through an smtp connection to a real
local SMTP server, a generic BaseNotifier, and [crashsafe] alert_notifiers."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from email import message_from_bytes
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import BaseNotifier

from airflow_crashsafe import config
from airflow_crashsafe.alerting import Alert, SinkError
from airflow_crashsafe.dags import AlertingSettings, build_alerting_dag
from airflow_crashsafe.dags.alerting import alert_task
from airflow_crashsafe.dags.notifiers import NotifierSink, notifier_sinks
from airflow_crashsafe.errors import ConfigurationError
from tests.unit.alerting.test_email import smtp  # noqa: F401  (a real aiosmtpd server fixture)

pytestmark = pytest.mark.floor  # CI's floor subset (docs/packaging.md, "Version floor")

SmtpNotifier = pytest.importorskip("airflow.providers.smtp.notifications.smtp").SmtpNotifier
T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)
SMTP_CLASS = "airflow.providers.smtp.notifications.smtp.SmtpNotifier"


SENT: list[tuple[str, str]] = []  # what every Kept notifier (each alert renders a copy) sent


class Kept(BaseNotifier):
    """A notifier that keeps its rendered message in SENT (or fails, when told to)."""

    template_fields = ("message", "channel")

    def __init__(self, channel: str = "#ops", message: str | None = None, fail: bool = False) -> None:
        super().__init__()
        self.channel, self.message, self.fail = channel, message, fail

    def notify(self, context: Any) -> None:
        if self.fail:
            raise RuntimeError("chat service down")
        SENT.append((self.channel, str(self.message)))


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    """No API connection, no alert_notifiers unless set, and an empty Kept outbox."""
    for var in (
        "AIRFLOW_CONN_CRASHSAFE_API",
        "AIRFLOW__CRASHSAFE__API_URL",
        "AIRFLOW__CRASHSAFE__ALERT_NOTIFIERS",
    ):
        monkeypatch.delenv(var, raising=False)
    SENT.clear()
    config.reset_cache()
    yield
    config.reset_cache()


@pytest.fixture
def smtp_conn(smtp: tuple[int, Any], monkeypatch: pytest.MonkeyPatch) -> Any:  # noqa: F811
    """An Airflow smtp connection ``smtp_ops`` to the local server (plain SMTP, no login)."""
    port, handler = smtp
    extra = {"disable_ssl": True, "disable_tls": True, "from_email": "airflow@example.org", "timeout": 5}
    conn = {"conn_type": "smtp", "host": "127.0.0.1", "port": port, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_OPS", json.dumps(conn))
    return handler


def dead_check() -> dict[str, Any]:
    """A check task that crashed: the alert task turns it into a warning alert."""
    return {"check_heartbeats": None}


def test_smtp_notifier_mails_the_alert_through_its_connection(tmp_path: Path, smtp_conn: Any) -> None:
    """SmtpNotifier with an smtp connection id delivers the alert: title as subject, its text as body."""
    notifier = SmtpNotifier(to="ops@example.org", smtp_conn_id="smtp_ops")
    settings = AlertingSettings(state_dir=str(tmp_path), grace=timedelta(0), notifiers=(notifier,))
    result = alert_task(settings, dead_check())
    assert result["pending_deliveries"] == 0
    [envelope] = smtp_conn.messages
    assert envelope.rcpt_tos == ["ops@example.org"]
    assert envelope.mail_from == "airflow@example.org"
    message = message_from_bytes(envelope.content)
    assert message["Subject"].startswith("[ALERT][WARNING] Alerting check 'check_heartbeats'")
    body = message.get_payload()[0].get_payload(decode=True).decode()
    assert "incident: " in body
    assert notifier.subject is None  # each alert renders a copy: the DAG's notifier stays a template


def test_alert_notifiers_option_builds_notifiers_from_class_and_connection_id(
    tmp_path: Path, smtp_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[crashsafe] alert_notifiers names the Notifier class and its kwargs (connection id included)."""
    entry = {"class": SMTP_CLASS, "kwargs": {"to": "oncall@example.org", "smtp_conn_id": "smtp_ops"}}
    entry["kwargs"]["subject"] = "crashsafe {{ alert.event }}: {{ alert.summary }}"
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ALERT_NOTIFIERS", json.dumps([entry]))
    config.reset_cache()
    dag = build_alerting_dag(state_dir=str(tmp_path), grace=timedelta(0))
    callable_ = dag.get_task("alert").python_callable  # type: ignore[attr-defined]
    callable_(ping=None, heartbeats=None, stuck=None, audit=None)
    subjects = sorted(message_from_bytes(e.content)["Subject"] for e in smtp_conn.messages)
    assert len(subjects) == 4
    assert all(s.startswith("crashsafe trigger: Alerting check") for s in subjects)


def test_a_generic_notifier_gets_the_alert_in_its_context_and_its_failure_is_retried(tmp_path: Path) -> None:
    """Any BaseNotifier renders {{ alert.* }}; one that raises leaves the alert pending in the outbox."""
    good = Kept(message="{{ alert.severity }}|{{ alert.summary }}")
    settings = AlertingSettings(
        state_dir=str(tmp_path), grace=timedelta(0), notifiers=(good, Kept(fail=True))
    )
    result = alert_task(settings, dead_check())
    summary = "Alerting check 'check_heartbeats' of DAG 'crashsafe_alerting' did not finish: see its task log"
    assert [("#ops", f"warning|{summary}")] == SENT
    assert result["pending_deliveries"] == 1


def test_unset_message_fields_get_the_alert_text() -> None:
    """A notifier whose message field is unset sends the alert's text, not a task-instance template."""
    alert = Alert("dk", "trigger", "critical", "scheduler dead", "prod", T0, T0, {"job": 7})
    NotifierSink(Kept()).send(alert)
    assert [("#ops", alert.text())] == SENT
    with pytest.raises(SinkError, match="RuntimeError from notifier sink 'Kept': chat service down"):
        NotifierSink(Kept(fail=True)).send(alert)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("not json", "is not JSON"),
        ('{"class": "x"}', "must be a JSON list of objects"),
        ('[{"klass": "x"}]', "needs 'class'"),
        ('[{"class": "airflow.providers.nope.Notifier"}]', "cannot import"),
        (f'[{{"class": "{SMTP_CLASS}", "kwargs": {{"too": "x"}}}}]', "does not take these kwargs"),
        (
            '[{"class": "airflow_crashsafe.errors.ConfigurationError", "kwargs": {}}]',
            "is not an Airflow Notifier",
        ),
    ],
)
def test_bad_alert_notifiers_are_configuration_errors(spec: str, needle: str) -> None:
    """Every mistake in alert_notifiers is a ConfigurationError saying what to write."""
    with pytest.raises(ConfigurationError, match=needle):
        notifier_sinks((), spec)


def test_http_notifier_posts_the_alert_to_its_connection_and_is_retried_until_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The http provider's HttpNotifier (a chat webhook) against a real local server: a 503 leaves the
    alert pending, the next run delivers it; the JSON payload is rendered from the alert."""
    from airflow.providers.http.notifications.http import HttpNotifier

    from airflow_crashsafe.testing.http import Reply, serve

    payload = {"text": "{{ alert.title }}", "severity": "{{ alert.severity }}"}
    payload["key"] = "{{ alert.dedup_key }}"
    notifier = HttpNotifier(http_conn_id="chat_hook", endpoint="hooks/ops", json=payload)
    sink = NotifierSink(notifier, retries=0)  # no in-run retries: the next run retries
    settings = AlertingSettings(state_dir=str(tmp_path), grace=timedelta(0), notifiers=(sink,))
    now = datetime.now(timezone.utc)
    with serve(lambda _request: Reply(503, {"error": "busy"})) as server:
        monkeypatch.setenv("AIRFLOW_CONN_CHAT_HOOK", json.dumps({"conn_type": "http", "host": server.url}))
        assert alert_task(settings, dead_check(), now)["pending_deliveries"] == 1
        server.answer(lambda _request: Reply(200, {"ok": True}))
        time.sleep(2.1)  # the outbox's back-off after a first failure: 2 s of the wall clock
        assert alert_task(settings, dead_check(), now + timedelta(minutes=1))["pending_deliveries"] == 0
    posts = [r for r in server.requests if r.method == "POST"]
    assert [r.path for r in posts] == ["/hooks/ops", "/hooks/ops"]  # the refused delivery, the retry
    body = posts[-1].json()
    assert body["text"].startswith("[ALERT][WARNING] Alerting check 'check_heartbeats'")
    assert body["severity"] == "warning"
    assert body["key"] == posts[0].json()["key"]  # the retry is the same alert
