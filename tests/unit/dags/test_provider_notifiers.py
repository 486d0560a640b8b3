"""The Slack and PagerDuty providers' Notifiers as the alerting DAG's sinks, each against a real local
server standing in for the service: what it receives, a 5xx retried with the same incident, and
the connection's secret kept out of logs, errors and the outbox."""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.dags import AlertingSettings
from airflow_crashsafe.dags.alerting import alert_task
from airflow_crashsafe.dags.findings import finding
from airflow_crashsafe.dags.notifiers import NotifierSink
from airflow_crashsafe.testing.http import Received, Reply, serve
from airflow_crashsafe.testing.tls import https_stand_in
from airflow_crashsafe.watchdog.state import StateFile

pytestmark = pytest.mark.floor  # CI's floor subset (docs/packaging.md, "Version floor")

slack_webhook = pytest.importorskip("airflow.providers.slack.notifications.slack_webhook")
slack_api = pytest.importorskip("airflow.providers.slack.notifications.slack")
pagerduty_notifier = pytest.importorskip("airflow.providers.pagerduty.notifications.pagerduty")
pagerduty = pytest.importorskip("pagerduty")

DOC = Path(__file__).resolve().parents[3] / "docs" / "notifiers.md"
WEBHOOK_TOKEN = "T0CRASH01/B0SAFE002/xoxWebhookS3cretToken9"
ROUTING_KEY = "R0uting5ecretKey0123456789abcdef"  # 32 characters, as PagerDuty's integration keys
SUMMARY = "Alerting check 'check_heartbeats' of DAG 'crashsafe_alerting' did not finish: see its task log"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    """No API connection, no alert_notifiers or proxy from the environment."""
    for var in (
        "AIRFLOW_CONN_CRASHSAFE_API",
        "AIRFLOW__CRASHSAFE__API_URL",
        "AIRFLOW__CRASHSAFE__ALERT_NOTIFIERS",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ):
        monkeypatch.delenv(var, raising=False)
    config.reset_cache()
    yield
    config.reset_cache()


def dead_check() -> dict[str, Any]:
    """A check task that crashed: the alert task turns it into a warning incident."""
    return {"check_heartbeats": None}


def healthy_check() -> dict[str, Any]:
    """The same check, run to the end with nothing wrong: its incident resolves."""
    return {"check_heartbeats": finding("heartbeats")}


def incident_key(settings: AlertingSettings) -> str:
    """The open incident's dedup key, rebuilt from the alerting DAG's state file and instance name."""
    incident = StateFile(settings.state_path() / "incidents.json").load()["heartbeats:did_not_finish"]
    return incident.dedup_key(settings.instance_name(settings.api()[0]))


def documented(name: str) -> list[dict[str, Any]]:
    """The ``[crashsafe] alert_notifiers`` value of docs/notifiers.md's block named ``name``."""
    match = re.search(rf"<!-- {name} -->\s*```json\n(.*?)```", DOC.read_text(), re.S)
    assert match, f"docs/notifiers.md has no ```json block after <!-- {name} -->"
    entries: list[dict[str, Any]] = json.loads(match.group(1))
    return entries


def leaked(secret: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, *more: Any) -> list[str]:
    """Where ``secret`` shows: the outbox, the incidents file, log records at INFO and above, ``more``."""
    places = {p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()}
    places["log"] = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
    places.update({f"value {i}": json.dumps(v, default=str) for i, v in enumerate(more)})
    return [where for where, text in places.items() if secret in text]


def test_slack_webhook_notifier_posts_the_incident_and_retries_a_5xx_with_the_same_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SlackWebhookNotifier from the documented alert_notifiers entry: a 503 (echoing the secret
    webhook path) leaves the alert pending with the token scrubbed; the next run posts the same text,
    which names the incident."""
    caplog.set_level(logging.INFO)
    [entry] = documented("slack-webhook")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ALERT_NOTIFIERS", json.dumps([{**entry, "retries": 0}]))
    config.reset_cache()
    settings = AlertingSettings(state_dir=str(tmp_path), grace=timedelta(0))
    now = datetime.now(timezone.utc)
    with serve(lambda request: Reply(503, f"no route to {request.path}")) as server:
        conn = {"conn_type": "slackwebhook", "password": f"{server.url}/services/{WEBHOOK_TOKEN}"}
        monkeypatch.setenv("AIRFLOW_CONN_SLACK_OPS", json.dumps(conn))
        first = alert_task(settings, dead_check(), now)
        assert first["pending_deliveries"] == 1
        [refused] = [r.getMessage() for r in caplog.records if "not delivered to sink" in r.getMessage()]
        assert "Status Code: 503" in refused
        assert "no route to ***" in refused
        server.answer(lambda _request: Reply(200, "ok"))
        time.sleep(2.1)  # the outbox's back-off after a first failure: 2 s of the wall clock
        second = alert_task(settings, dead_check(), now + timedelta(minutes=1))
        assert second["pending_deliveries"] == 0
    posts = [r for r in server.requests if r.method == "POST"]
    assert [r.path for r in posts] == [f"/services/{WEBHOOK_TOKEN}"] * 2  # refused, then delivered
    assert posts[0].json() == posts[1].json()  # a retry is the same message
    text = posts[1].json()["text"]
    assert text.startswith(f":rotating_light: [ALERT][WARNING] {SUMMARY}")
    assert text.rstrip().endswith(f"\nincident: {incident_key(settings)}")
    assert leaked(WEBHOOK_TOKEN, tmp_path, caplog, first, second) == []


def test_slack_api_notifier_posts_through_the_web_api_with_the_connection_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SlackNotifier (chat.postMessage) against a local Web API at the connection's base_url: the bot
    token travels as a Bearer header only; the channel and text come from the alert's templates."""
    caplog.set_level(logging.INFO)
    bot_token = "xoxb-0000-1111-crashsafeBotS3cret"
    notifier = slack_api.SlackNotifier(
        slack_conn_id="slack_api_ops",
        channel="#oncall",
        text="{{ alert.title }} (incident {{ alert.dedup_key }})",
    )
    settings = AlertingSettings(state_dir=str(tmp_path), grace=timedelta(0), notifiers=(notifier,))
    with serve(lambda _request: Reply(200, {"ok": True, "channel": "C1", "ts": "1.2"})) as server:
        conn = {"conn_type": "slack", "password": bot_token, "extra": {"base_url": f"{server.url}/api/"}}
        monkeypatch.setenv("AIRFLOW_CONN_SLACK_API_OPS", json.dumps(conn))
        result = alert_task(settings, dead_check())
    assert result["pending_deliveries"] == 0
    [post] = [r for r in server.requests if r.method == "POST"]
    assert post.path == "/api/chat.postMessage"
    assert post.headers["Authorization"] == f"Bearer {bot_token}"
    body = post.json()
    assert body["channel"] == "#oncall"
    key = incident_key(settings)
    assert body["text"] == f"[ALERT][WARNING] {SUMMARY} ({key.split(':')[1]}) (incident {key})"
    assert bot_token not in post.body.decode()
    assert leaked(bot_token, tmp_path, caplog, result) == []


def test_pagerduty_notifier_opens_one_incident_keyed_by_the_alert_retries_a_5xx_and_resolves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """PagerdutyNotifier, unmodified, through HTTPS_PROXY to a stand-in for events.pagerduty.com: a
    500 (echoing the routing key) is retried by the client, then kept in the outbox, scrubbed; the
    next run triggers with the same dedup_key, the run after the check recovers resolves it."""
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(pagerduty.EventsApiV2Client, "sleep_timer", 0.01)  # its 5xx back-off, in ms
    [entry] = documented("pagerduty")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ALERT_NOTIFIERS", json.dumps([{**entry, "retries": 0}]))
    monkeypatch.setenv(
        "AIRFLOW_CONN_PAGERDUTY_OPS", json.dumps({"conn_type": "pagerduty_events", "password": ROUTING_KEY})
    )
    config.reset_cache()
    settings = AlertingSettings(state_dir=str(tmp_path), grace=timedelta(0))

    def down(request: Received) -> Reply:
        return Reply(500, {"message": f"routing_key {request.json()['routing_key']} unavailable"})

    def accepts(request: Received) -> Reply:
        return Reply(
            202, {"status": "success", "message": "Event processed", "dedup_key": request.json()["dedup_key"]}
        )

    now = datetime.now(timezone.utc)
    with https_stand_in(["events.pagerduty.com"], tmp_path / "tls", down) as stand_in:
        monkeypatch.setenv("HTTPS_PROXY", stand_in.proxy_url)
        monkeypatch.setenv("SSL_CERT_FILE", str(stand_in.ca_file))
        runs = [alert_task(settings, dead_check(), now)]
        assert runs[0]["pending_deliveries"] == 1
        key = incident_key(settings)
        [refused] = [r.getMessage() for r in caplog.records if "not delivered to sink" in r.getMessage()]
        assert "status 500" in refused
        assert "routing_key *** unavailable" in refused
        stand_in.server.answer(accepts)
        time.sleep(2.1)  # the outbox's back-off after a first failure: 2 s of the wall clock
        runs.append(alert_task(settings, dead_check(), now + timedelta(minutes=1)))
        runs.append(alert_task(settings, healthy_check(), now + timedelta(minutes=2)))
    assert [r["pending_deliveries"] for r in runs] == [1, 0, 0]
    assert runs[2]["alerts"] == [f"resolve: recovered: {SUMMARY}"]
    tunnels = [r for r in stand_in.server.requests if r.method == "CONNECT"]
    assert {r.path for r in tunnels} == {"events.pagerduty.com:443"}
    events = [r for r in stand_in.server.requests if r.method == "POST"]
    assert {(r.path, r.headers["Host"]) for r in events} == {("/v2/enqueue", "events.pagerduty.com")}
    bodies = [r.json() for r in events]
    # 1 + the client's 2 retries of a 500, the outbox's retry next run, the resolve: one dedup_key
    assert [(b["event_action"], b["dedup_key"]) for b in bodies] == [("trigger", key)] * 4 + [
        ("resolve", key)
    ]
    assert all(b["routing_key"] == ROUTING_KEY for b in bodies)  # the stand-in is the only place it goes
    payload = bodies[3]["payload"]
    assert payload["summary"] == f"[ALERT][WARNING] {SUMMARY} ({key.split(':')[1]})"
    assert payload["severity"] == "warning"
    assert payload["source"] == key.split(":")[1]
    assert payload["component"] == "airflow-crashsafe"
    details = payload["custom_details"]
    assert details["dedup_key"] == key
    assert details["details"]["task_id"] == "check_heartbeats"
    assert leaked(ROUTING_KEY, tmp_path, caplog, *runs) == []


def test_pagerduty_notifier_built_in_python_follows_the_incident_without_templates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PagerdutyNotifier(summary=None, severity=None) passed to the DAG gets the alert's title, severity
    and dedup key, and a resolve for a resolve, with no template written."""
    notifier = pagerduty_notifier.PagerdutyNotifier(
        summary=None, severity=None, pagerduty_events_conn_id="pd"
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_PD", json.dumps({"conn_type": "pagerduty_events", "password": ROUTING_KEY})
    )
    settings = AlertingSettings(state_dir=str(tmp_path), grace=timedelta(0), notifiers=(notifier,))

    def accepts(request: Received) -> Reply:
        return Reply(202, {"status": "success", "dedup_key": request.json()["dedup_key"]})

    now = datetime.now(timezone.utc)
    with https_stand_in(["events.pagerduty.com"], tmp_path / "tls", accepts) as stand_in:
        monkeypatch.setenv("HTTPS_PROXY", stand_in.proxy_url)
        monkeypatch.setenv("SSL_CERT_FILE", str(stand_in.ca_file))
        alert_task(settings, dead_check(), now)
        key = incident_key(settings)
        alert_task(settings, healthy_check(), now + timedelta(minutes=1))
    trigger, resolve = (r.json() for r in stand_in.server.requests if r.method == "POST")
    assert (trigger["event_action"], resolve["event_action"]) == ("trigger", "resolve")
    assert trigger["dedup_key"] == resolve["dedup_key"] == key
    assert trigger["payload"]["severity"] == "warning"
    assert trigger["payload"]["summary"].startswith(f"[ALERT][WARNING] {SUMMARY}")
    assert notifier.summary is None
    assert notifier.action == "trigger"


def test_a_failing_notifier_error_is_scrubbed_of_its_connection_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A webhook connection with a mistyped scheme: slack_sdk's error quotes the whole URL, token
    included; the SinkError (logged, kept in the outbox) names the sink and the failure, not the token."""
    from airflow_crashsafe.alerting import Alert, SinkError

    conn = {"conn_type": "slackwebhook", "password": f"htps://hooks.example.org/services/{WEBHOOK_TOKEN}"}
    monkeypatch.setenv("AIRFLOW_CONN_SLACK_TYPO", json.dumps(conn))
    notifier = slack_webhook.SlackWebhookNotifier(slack_webhook_conn_id="slack_typo", text=None)
    t0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)
    alert = Alert("dk", "trigger", "critical", "scheduler dead", "prod", t0, t0)
    with pytest.raises(
        SinkError, match="SlackRequestError from notifier sink 'SlackWebhookNotifier': Invalid URL"
    ) as raised:
        NotifierSink(notifier).send(alert)
    assert WEBHOOK_TOKEN not in str(raised.value)
