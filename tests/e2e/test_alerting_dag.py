"""The alerting DAG (``dags_examples/crashsafe_alerting.py``) run once inside a real Airflow 3.3.

One booted Airflow (api-server, scheduler, dag-processor, LocalExecutor, PostgreSQL metadata), the
DAG file copied into its dags folder, a local HTTP server playing the dead-man's switch, a local
webhook as the alert sink and ``AIRFLOW_CONN_CRASHSAFE_API`` pointing at the api-server: under
SimpleAuthManager's ``all_admins`` (the drill's setting) the api-server's middleware makes every
request an admin's, so the connection needs no credentials. The DAG is triggered through the REST
API and its run, XComs and side effects are checked. About 1.5-2 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests

from drill.airflow_home import repo_root
from drill.cluster import find_pg_bin
from drill.components import wait_until
from drill.stack import AirflowStack
from drill.watch import WebhookReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

DAG_ID = "crashsafe_alerting"
DAG_FILE = repo_root() / "dags_examples" / "crashsafe_alerting.py"
PING_PATH = "/ping/3f6c1d2e-test-switch"


class DeadMansSwitch:
    """A local monitor endpoint: records the time of every GET (healthchecks.io answers 200)."""

    def __init__(self) -> None:
        self.pings: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        switch = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with switch._lock:
                    switch.pings.append((time.time(), self.path))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{PING_PATH}"

    def snapshot(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self.pings)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Booted:
    """The booted stack and the in-process endpoints its DAG talks to."""

    def __init__(self, stack: AirflowStack, switch: DeadMansSwitch, sink: WebhookReceiver) -> None:
        self.stack, self.switch, self.sink = stack, switch, sink
        self.http = requests.Session()

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.http.request(method, self.stack.api_url + path, timeout=15, **kwargs)


@pytest.fixture(scope="module")
def booted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    """Airflow with the alerting DAG, a dead-man's switch and a webhook sink; all killed after."""
    if find_pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs PostgreSQL binaries for the alerting DAG e2e test", pytrace=False)
        pytest.skip("no PostgreSQL binaries for the metadata DB")
    workdir = tmp_path_factory.mktemp("alerting-e2e")
    switch, sink = DeadMansSwitch(), WebhookReceiver()
    config = Path(workdir) / "alerting.json"
    config.write_text(json.dumps({"sinks": [{"type": "webhook", "name": "e2e", "url": sink.url}]}))
    stack = AirflowStack(str(workdir))
    stack.extra_env = {
        "AIRFLOW__CRASHSAFE__DEAD_MANS_SWITCH_URL": switch.url,
        "AIRFLOW__CRASHSAFE__ALERTING_CONFIG": str(config),
        # No credentials: all_admins makes the api-server treat every request as an admin's.
        "AIRFLOW_CONN_CRASHSAFE_API": json.dumps({"conn_type": "http", "host": stack.api_url}),
    }
    stack.add_dag(DAG_FILE)
    try:
        stack.start()
        booted = Booted(stack, switch, sink)
        yield booted
        booted.http.close()
    finally:
        left = stack.close()
        switch.close()
        sink.close()
        assert left == 0, "processes of the test Airflow survived its cleanup"


def _xcom(booted: Booted, run_id: str, task_id: str) -> Any:
    path = (
        f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        "/xcomEntries/return_value"
    )
    response = booted.api("GET", path, params={"deserialize": "true"})
    assert response.status_code == 200, f"{task_id}: HTTP {response.status_code} {response.text[:300]}"
    value = response.json()["value"]
    return json.loads(value) if isinstance(value, str) else value


def test_alerting_dag_runs_green_in_real_airflow(booted: Booted) -> None:
    """Triggered via REST: run succeeds, switch pinged, live scheduler seen, API checks ran, no alert."""
    wait_until(
        f"DAG {DAG_ID} to be parsed",
        lambda: booted.api("GET", f"/api/v2/dags/{DAG_ID}").status_code == 200,
        90,
    )
    response = booted.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None})
    assert response.status_code == 200, f"trigger: HTTP {response.status_code} {response.text[:300]}"
    run_id = response.json()["dag_run_id"]
    run_path = f"/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"

    def finished() -> str | None:
        state = booted.api("GET", run_path).json()["state"]
        return state if state in ("success", "failed") else None

    state = wait_until(f"run {run_id} to finish", finished, 150, interval=2)
    tis = booted.api("GET", f"{run_path}/taskInstances").json()["task_instances"]
    states = {ti["task_id"]: ti["state"] for ti in tis}
    assert state == "success", f"run {run_id} ended {state}: {states}"
    assert set(states.values()) == {"success"}, states

    ping_ti = next(ti for ti in tis if ti["task_id"] == "ping_dead_mans_switch")
    began, ended = (datetime.fromisoformat(ping_ti[k]).timestamp() for k in ("start_date", "end_date"))
    pings = [path for at, path in booted.switch.snapshot() if began - 1 <= at <= ended + 1]
    assert pings == [PING_PATH], f"no ping from this run's task; all: {booted.switch.snapshot()}"
    assert _xcom(booted, run_id, "ping_dead_mans_switch") == {
        "check": "dead_mans_switch",
        "ran": True,
        "complete": True,
        "conditions": [],
        "notes": [],
    }

    heartbeats = _xcom(booted, run_id, "check_heartbeats")
    assert (heartbeats["ran"], heartbeats["complete"]) == (True, True), heartbeats
    assert heartbeats["conditions"] == [], heartbeats

    for task_id, check in (("find_stuck_tasks", "stuck_tasks"), ("reconcile_audit", "audit_reconcile")):
        found = _xcom(booted, run_id, task_id)
        assert found["check"] == check
        assert (found["ran"], found["complete"]) == (True, True), f"{task_id} did not use the API: {found}"
        assert found["conditions"] == [], found

    stuck = _xcom(booted, run_id, "find_stuck_tasks")
    audit = _xcom(booted, run_id, "reconcile_audit")
    print(f"heartbeats {heartbeats}; stuck {stuck}; audit {audit}")
    result = _xcom(booted, run_id, "alert")
    assert (result["alerts"], result["open"]) == ([], []), result
    assert result["pending_deliveries"] == 0, result
    assert booted.sink.snapshot() == [], [d.summary() for d in booted.sink.snapshot()]
