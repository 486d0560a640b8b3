"""The alerting DAG's task callables against real HTTP servers: a fake api-server, a dead-man's
switch, and a webhook receiver that gets the alerts."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import airflow  # noqa: F401  (its first import configures logging; done here, not inside caplog)
import pytest

from airflow_crashsafe.dags import AlertingSettings, build_alerting_dag
from airflow_crashsafe.dags.alerting import alert_task, audit_task, heartbeats_task, ping_task, stuck_task
from airflow_crashsafe.errors import ConfigurationError
from tests.support.httpserver import Recorded, Reply, Server, serve


def iso(age: float) -> str:
    """A timestamp ``age`` seconds before the moment of the request (not of the module's import:
    the checks compare against the real clock, and tests before this one may take minutes)."""
    return (datetime.now(timezone.utc) - timedelta(seconds=age)).isoformat()


def fake_airflow(
    scheduler_age: list[float], tis: dict[str, list[dict[str, Any]]]
) -> Callable[[Recorded], Reply]:
    """An api-server: health (scheduler heartbeat ``scheduler_age[0]`` s old), login, jobs, task instances."""

    def handle(request: Recorded) -> Reply:
        parts = urlsplit(request.path)
        if parts.path == "/api/v2/monitor/health":
            beat = iso(scheduler_age[0])
            status = "healthy" if scheduler_age[0] < 30 else "unhealthy"
            return Reply(
                200,
                {
                    "metadatabase": {"status": "healthy"},
                    "scheduler": {"status": status, "latest_scheduler_heartbeat": beat},
                    "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
                    "dag_processor": {"status": None, "latest_dag_processor_heartbeat": None},
                },
            )
        if parts.path == "/auth/token":
            return Reply(201, {"access_token": "tok"})
        if parts.path == "/api/v2/jobs":
            return Reply(200, {"jobs": [], "total_entries": 0})
        if parts.path == "/api/v2/dags/~/dagRuns/~/taskInstances":
            state = parse_qs(parts.query)["state"][0]
            return Reply(
                200, {"task_instances": tis.get(state, []), "total_entries": len(tis.get(state, []))}
            )
        return Reply(404, {"detail": "not found"})

    return handle


def settings_for(tmp_path: Path, receiver: Server, **kwargs: Any) -> AlertingSettings:
    """Settings whose sinks post to ``receiver`` and whose state lives in tmp_path; no grace."""
    config = tmp_path / "sinks.json"
    hook = {"type": "webhook", "url": f"{receiver.url}/hook", "retries": 0, "timeout": 2}
    config.write_text(json.dumps({"watch": {"interval": 10}, "sinks": [hook]}))
    kwargs.setdefault("grace", timedelta(0))
    return AlertingSettings(sinks_config=str(config), state_dir=str(tmp_path / "state"), **kwargs)


def posted(receiver: Server) -> list[tuple[str, str, str]]:
    """(event, severity, dedup_key) of every alert the webhook receiver got."""
    return [
        (body["event"], body["severity"], body["dedup_key"])
        for body in (r.json() for r in receiver.requests if r.path == "/hook")
    ]


@pytest.fixture(autouse=True)
def _no_api_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """No crashsafe_api connection and no [crashsafe] overrides unless a test sets them."""
    for var in (
        "AIRFLOW_CONN_CRASHSAFE_API",
        "AIRFLOW__CRASHSAFE__API_URL",
        "AIRFLOW__CRASHSAFE__DEAD_MANS_SWITCH_URL",
    ):
        monkeypatch.delenv(var, raising=False)


def test_ping_reaches_the_switch_and_a_failure_is_a_condition_without_its_token() -> None:
    """A 2xx ping is clean; a 500 becomes a warning naming only the host, never the URL's token."""
    with serve() as switch:
        url = f"{switch.url}/ping/secret-uuid-1234"
        assert ping_task(AlertingSettings(dead_mans_switch_url=url))["conditions"] == []
        assert [r.path for r in switch.requests] == ["/ping/secret-uuid-1234"]
        switch.answer(lambda _r: Reply(500, {}))
        found = ping_task(AlertingSettings(dead_mans_switch_url=url))
    [cond] = found["conditions"]
    assert (cond["key"], cond["severity"]) == ("ping_failed", "warning")
    assert switch.url in cond["summary"]
    assert "secret-uuid" not in json.dumps(found)


def test_missing_switch_url_is_a_warning_not_silence(caplog: pytest.LogCaptureFixture) -> None:
    """Without a URL the ping is skipped with a WARNING saying how to configure it."""
    with caplog.at_level(logging.WARNING):
        found = ping_task(AlertingSettings())
    assert found["ran"] is False
    assert "dead_mans_switch_url" in caplog.text


def test_dead_scheduler_alerts_once_through_the_webhook_and_resolves(tmp_path: Path) -> None:
    """A stale scheduler heartbeat triggers one webhook alert, stays quiet, then resolves, one dedup key."""
    age = [45.0]
    with serve(fake_airflow(age, {})) as api, serve() as receiver:
        settings = settings_for(tmp_path, receiver, api_url=api.url)
        for _ in range(2):
            findings = {"check_heartbeats": heartbeats_task(settings)}
            result = alert_task(settings, findings)
        assert [c["key"] for c in findings["check_heartbeats"]["conditions"]] == ["scheduler_dead"]
        assert result["open"] == ["heartbeats:scheduler_dead"]
        age[0] = 2.0
        alert_task(settings, {"check_heartbeats": heartbeats_task(settings)})
    events = posted(receiver)
    assert [(e, s) for e, s, _ in events] == [("trigger", "critical"), ("resolve", "critical")]
    assert events[0][2] == events[1][2]
    assert f"{urlsplit(api.url).hostname}/crashsafe_alerting" in events[0][2]


def test_api_checks_are_skipped_with_a_warning_without_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No crashsafe_api connection: stuck tasks and reconciliation are skipped with WARNINGs."""
    with caplog.at_level(logging.WARNING):
        stuck = stuck_task(AlertingSettings())
        audit = audit_task(AlertingSettings())
    assert (stuck["ran"], audit["ran"]) == (False, False)
    assert caplog.text.count("no connection 'crashsafe_api' exists") == 2


def test_stuck_tasks_are_found_through_the_authenticated_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks queued > 10 min or running > 6 h are one incident per state; our own DAG is ignored."""

    def ti(dag: str, task: str, state: str, **when: str) -> dict[str, Any]:
        return {"dag_id": dag, "task_id": task, "map_index": -1, "dag_run_id": "r", "try_number": 1,
                "state": state, "hostname": "w1", **when}  # fmt: skip

    tis = {
        "queued": [
            ti("nightly", "load", "queued", queued_when=iso(1200)),
            ti("nightly", "fresh", "queued", queued_when=iso(60)),
            ti("crashsafe_alerting", "alert", "queued", queued_when=iso(1200)),
        ],
        "running": [ti("nightly", "slow", "running", start_date=iso(7 * 3600))],
    }
    with serve(fake_airflow([2.0], tis)) as api:
        conn = {"conn_type": "http", "host": api.url, "login": "admin", "password": "pw"}
        monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_API", json.dumps(conn))
        # The clock of the call, like iso(): the module's import may be many minutes earlier.
        found = stuck_task(AlertingSettings(), now=datetime.now(timezone.utc))
    by_key = {c["key"]: c for c in found["conditions"]}
    assert sorted(by_key) == ["queued_too_long", "running_too_long"]
    assert [t.split(" ")[0] for t in by_key["queued_too_long"]["details"]["tasks"]] == ["nightly.load[-1]"]
    assert by_key["running_too_long"]["summary"] == "1 task(s) running for more than 360 min"
    ti_requests = [r for r in api.requests if r.path.startswith("/api/v2/dags/")]
    assert ti_requests
    assert all(r.headers.get("Authorization") == "Bearer tok" for r in ti_requests)


def test_reconcile_runs_against_the_store_with_a_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the connection, the audit reconciliation runs a pass over the store and reports it."""
    from airflow_crashsafe.store import open_store, reset_store_cache

    with serve(fake_airflow([2.0], {})) as api:
        monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_API", json.dumps({"conn_type": "http", "host": api.url}))
        reset_store_cache()
        try:
            found = audit_task(AlertingSettings(), store=open_store(f"sqlite:///{tmp_path / 'cs.db'}"))
        finally:
            reset_store_cache()
    assert (found["ran"], found["conditions"]) == (True, [])
    assert found["notes"][0].startswith("0 task instances")


def test_a_check_that_did_not_finish_is_alerted(tmp_path: Path) -> None:
    """A check task that crashed (no XCom) becomes a warning alert through the sinks."""
    with serve() as receiver:
        settings = settings_for(tmp_path, receiver)
        dag = build_alerting_dag(
            sinks_config=settings.sinks_config, state_dir=settings.state_dir, grace=timedelta(0)
        )
        callable_ = dag.get_task("alert").python_callable  # type: ignore[attr-defined]
        result = callable_(ping=None, heartbeats=None, stuck=None, audit=None)
    assert len(result["alerts"]) == 4
    assert {e for e, _s, _k in posted(receiver)} == {"trigger"}
    assert len(posted(receiver)) == 4


def test_broken_sinks_config_fails_the_alert_task(tmp_path: Path) -> None:
    """A sinks file with a mistake raises (the run fails, so the watchdog's canary reports it)."""
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"sinks": [{"type": "carrier-pigeon"}]}))
    settings = AlertingSettings(sinks_config=str(config), state_dir=str(tmp_path))
    with pytest.raises(ConfigurationError, match="'type' must be one of"):
        alert_task(settings, {})
