"""Deadlines through a real Airflow 3.3.2 api-server's REST API, with the scheduler dead.

One api-server (SQLite metadata, SimpleAuthManager with a password) serves two DAGs parsed by
``airflow dags reserialize``; their runs and task instances are written as Airflow writes them,
beside a ``running`` SchedulerJob whose heartbeat stopped (no scheduler runs). The watchdog logs
in at ``/auth/token`` and reads runs, task instances, ``/tasks`` (dependencies) and the
successful history with no help from the scheduler.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from airflow_crashsafe.watchdog import cli
from drill.airflow_home import DrillHome, component_env
from drill.components import Component, health, kill_drill_processes, wait_until
from tests.support.httpserver import Reply, Server, serve
from tests.support.watch_starts import watching_since

pytestmark = pytest.mark.integration

PASSWORD = "watch-pw-1"
TASKS = {"extract": ["load"], "load": ["report"], "report": []}
HISTORY = {"extract": 1200.0, "load": 1800.0, "report": 600.0}  # 20 + 30 + 10 min
NOW = datetime.now(timezone.utc)  # set again when this module's tests start: see _now_is_when_tests_run


@pytest.fixture(scope="module", autouse=True)
def _now_is_when_tests_run(api: DrillHome) -> None:
    """Run and deadline times count from when these tests run, not from collection (in CI the e2e
    tests run in between, and a task "running for 10 minutes" would have run for 25), nor from
    before the api-server booted (over a minute on a busy machine)."""
    global NOW
    NOW = datetime.now(timezone.utc)


def stamp(at: datetime | None) -> str | None:
    """Airflow's UtcDateTime in SQLite: naive UTC text."""
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") if at else None


def write_dags(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for dag_id in ("nightly", "slow"):
        (folder / f"{dag_id}.py").write_text(
            textwrap.dedent(
                f"""
                from airflow.sdk import DAG
                from airflow.providers.standard.operators.empty import EmptyOperator

                with DAG({dag_id!r}, schedule=None):
                    extract = EmptyOperator(task_id="extract")
                    load = EmptyOperator(task_id="load")
                    report = EmptyOperator(task_id="report")
                    extract >> load >> report
                """
            )
        )


def add_run(db: Path, dag_id: str, run_id: str, after: datetime, state: str, tasks: dict[str, Any]) -> None:
    """A dag_run and its task instances (task id -> (state, start, duration))."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, logical_date, start_date, "
            "end_date, clear_number) VALUES (?, ?, 'scheduled', ?, ?, ?, ?, ?, 0)",
            (dag_id, run_id, state, stamp(after), stamp(after), stamp(after), None),
        )
        for task, (ti_state, start, duration) in tasks.items():
            end = start + timedelta(seconds=duration) if start and duration else None
            conn.execute(
                "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, max_tries, "
                "pool, pool_slots, state, start_date, end_date, duration, executor_config) "
                "VALUES (?, ?, ?, ?, -1, 1, 0, 'default_pool', 1, ?, ?, ?, ?, x'80047D942E')",
                (uuid.uuid4().hex, task, dag_id, run_id, ti_state, stamp(start), stamp(end), duration),
            )


def succeed(db: Path, run_id: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE dag_run SET state = 'success', end_date = ? WHERE run_id = ?", (stamp(NOW), run_id)
        )
        conn.execute("UPDATE task_instance SET state = 'success' WHERE run_id = ?", (run_id,))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DrillHome]:
    """A running api-server over the two DAGs, three past successful runs each, a dead scheduler."""
    home = DrillHome.create(str(tmp_path_factory.mktemp("deadline-api")))
    dags = home.root / "dags"
    write_dags(dags)
    (home.airflow_home / "simple_auth_manager_passwords.json.generated").write_text(
        json.dumps({"watch": PASSWORD})
    )
    env = component_env(
        home,
        dags_folder=dags,
        metadata_url=f"sqlite:///{home.metadata_sqlite}",
        extra={
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "watch:viewer",
        },
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    for argv in ([airflow, "db", "migrate"], [airflow, "dags", "reserialize"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    for dag_id in ("nightly", "slow"):
        for day in range(3):
            after = NOW - timedelta(days=5 + day)
            tasks = {t: ("success", after, HISTORY[t]) for t in TASKS}
            add_run(home.metadata_sqlite, dag_id, f"scheduled__past{day}", after, "success", tasks)
    with sqlite3.connect(home.metadata_sqlite) as conn:
        conn.execute(
            "INSERT INTO job (state, job_type, start_date, latest_heartbeat, hostname) "
            "VALUES ('running', 'SchedulerJob', ?, ?, 'dead-scheduler')",
            (stamp(NOW - timedelta(hours=3)), stamp(NOW - timedelta(minutes=10))),
        )
    server = Component("api-server", [airflow, "api-server"], env, home.logs / "api-server.log")
    try:
        server.start()
        wait_until("the api-server", lambda: health(home.api_url), timeout=180)
        yield home
    except BaseException:
        print(f"--- api-server log ---\n{server.tail(60)}")
        raise
    finally:
        server.kill_group()
        kill_drill_processes({server.pid} if server.pid else set(), home.airflow_home)
        if not os.environ.get("CRASHSAFE_KEEP_UI_HOME"):
            home.remove()


@pytest.fixture
def webhook() -> Iterator[Server]:
    with serve(lambda _r: Reply(200, {})) as server:
        yield server


def watch_once(
    api: DrillHome, webhook: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow: bool = False
) -> int:
    """``airflow-crashsafe watch --once`` over the API with a missed and an at-risk deadline."""
    monkeypatch.setenv("WATCH_PW", PASSWORD)
    missed_at = (NOW - timedelta(minutes=1)).strftime("%H:%M")
    early_at = (NOW + timedelta(minutes=41)).strftime("%H:%M")
    config = {
        "watch": {
            "expect_triggerer": "no",
            "expect_dag_processor": "no",
            "deadline_keep": 7200,
            "watch_airflow_deadlines": airflow,
        },
        "sinks": [{"type": "webhook", "url": webhook.url + "/hook", "min_severity": "info"}],
        "deadlines": [
            {"dag_id": "nightly", "at": missed_at, "timezone": "UTC"},
            {"dag_id": "slow", "at": early_at, "timezone": "UTC", "early_severity": "warning"},
        ],
    }
    path = tmp_path / "watch.json"
    path.write_text(json.dumps(config))
    watching_since(path, tmp_path / "state", NOW - timedelta(hours=3))  # as if it had run for hours
    argv = ["--once", "--api-url", api.api_url, "--api-user", "watch", "--api-password-env", "WATCH_PW"]
    return cli.main([*argv, "--config", str(path), "--state-dir", str(tmp_path / "state")])


def received(webhook: Server) -> list[dict[str, Any]]:
    """Every deadline alert the webhook got, in order."""
    bodies = [request.json() for request in webhook.requests]
    return [body for body in bodies if ":deadline_" in body["dedup_key"]]


def deadline_alerts(webhook: Server) -> dict[tuple[str, str], dict[str, Any]]:
    """The deadline alerts by (event, incident kind), the last of each."""
    return {(body["event"], body["dedup_key"].split(":")[2]): body for body in received(webhook)}


def test_api_source_pages_missed_and_early_then_resolves(
    api: DrillHome, webhook: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scheduler dead: the stuck run pages missed, the slow one pages early; success resolves both."""
    db = api.metadata_sqlite
    add_run(
        db,
        "nightly",
        "scheduled__stuck",
        NOW - timedelta(hours=4),
        "running",
        {
            "extract": ("success", NOW - timedelta(hours=3), 1200.0),
            "load": ("running", NOW - timedelta(hours=2), None),
            "report": (None, None, None),
        },
    )
    add_run(
        db,
        "slow",
        "scheduled__slow",
        NOW - timedelta(hours=1),
        "running",
        {
            "extract": ("running", NOW - timedelta(minutes=10), None),
            "load": (None, None, None),
            "report": (None, None, None),
        },
    )
    assert watch_once(api, webhook, tmp_path, monkeypatch) == 1
    alerts = deadline_alerts(webhook)
    missed = alerts[("trigger", "deadline_missed")]
    assert missed["details"]["dag_id"] == "nightly"
    assert missed["details"]["run_id"] == "scheduled__stuck"
    assert [t["task_id"] for t in missed["details"]["critical_path"]] == ["report"]
    early = alerts[("trigger", "deadline_at_risk")]
    assert early["severity"] == "warning"
    assert early["details"]["dag_id"] == "slow"
    assert [t["task_id"] for t in early["details"]["critical_path"]] == ["extract", "load", "report"]
    assert early["details"]["remaining_seconds"] == pytest.approx(600 + 1800 + 600, abs=60)
    assert len(alerts) == 2
    succeed(db, "scheduled__stuck")
    succeed(db, "scheduled__slow")
    watch_once(api, webhook, tmp_path, monkeypatch)
    alerts = deadline_alerts(webhook)
    assert alerts[("resolve", "deadline_missed")]["dedup_key"] == missed["dedup_key"]
    assert alerts[("resolve", "deadline_at_risk")]["dedup_key"] == early["dedup_key"]


def add_airflow_deadline(db: Path, run_id: str, at: datetime) -> None:
    """A ``deadline`` row as Airflow's DeadlineAlert writes it when the run is created (with its callback)."""
    callback = uuid.uuid4().hex
    with sqlite3.connect(db) as conn:
        (run_pk,) = conn.execute("SELECT id FROM dag_run WHERE run_id = ?", (run_id,)).fetchone()
        conn.execute(
            "INSERT INTO callback (id, type, fetch_method, data, priority_weight, created_at) "
            "VALUES (?, 'triggerer', 'import_path', '{}', 1, ?)",
            (callback, stamp(NOW)),
        )
        conn.execute(
            "INSERT INTO deadline (id, created_at, last_updated_at, dagrun_id, deadline_time, missed, "
            "callback_id) VALUES (?, ?, ?, ?, ?, 0, ?)",
            (uuid.uuid4().hex, stamp(NOW), stamp(NOW), run_pk, stamp(at), callback),
        )


def test_airflow_deadline_alert_pages_through_the_api(
    api: DrillHome, webhook: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """watch_airflow_deadlines: a deadline Airflow recorded for a run pages once it passes, scheduler dead."""
    db = api.metadata_sqlite
    tasks = {"extract": ("running", NOW - timedelta(hours=1), None), "load": (None, None, None)}
    add_run(
        db,
        "nightly",
        "manual__declared",
        NOW - timedelta(hours=2),
        "running",
        {**tasks, "report": (None, None, None)},
    )
    add_airflow_deadline(db, "manual__declared", NOW - timedelta(minutes=5))
    watch_once(api, webhook, tmp_path, monkeypatch, airflow=True)
    theirs = [
        body
        for body in received(webhook)
        if body["event"] == "trigger" and body["details"]["deadline"].startswith("airflow:")
    ]
    assert len(theirs) == 1
    assert theirs[0]["details"]["run_id"] == "manual__declared"
    assert theirs[0]["details"]["deadline_utc"] == (NOW - timedelta(minutes=5)).isoformat()


class RecordingSession(requests.Session):
    """A session that keeps the path of each request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.paths.append(f"{method!s} {urlsplit(str(url)).path}")
        return super().request(method, url, *args, **kwargs)


def test_rest_reads_between_polls_only_what_changes_a_forecast(api: DrillHome) -> None:
    """A second poll learns a finish and a resume from deferral, not heartbeats, and names no DAG in a GET."""
    from airflow_crashsafe.watchdog.api import ApiSource
    from airflow_crashsafe.watchdog.run_fetchers import ApiRunFetcher
    from airflow_crashsafe.watchdog.runs import RunReader

    db = api.metadata_sqlite
    tasks = {
        "extract": ("running", NOW - timedelta(minutes=30), None),
        "load": ("queued", None, None),
        "report": ("running", NOW - timedelta(minutes=5), None),
    }
    add_run(db, "slow", "scheduled__polled", NOW - timedelta(minutes=90), "running", tasks)
    session = RecordingSession()
    source = ApiSource(api.api_url, username="watch", password=PASSWORD, session=session)
    reader = RunReader(lambda now: {"slow": NOW - timedelta(hours=2)}, refresh=3600)
    fetcher = ApiRunFetcher(source.get_json, source.post_json)
    reader.read(fetcher, datetime.now(timezone.utc))
    with sqlite3.connect(db) as conn:
        conn.execute(  # extract finished; report heartbeats; load resumes with its pre-deferral start
            "UPDATE task_instance SET updated_at = ?, state = CASE task_id WHEN 'extract' THEN 'success' "
            "WHEN 'load' THEN 'running' ELSE state END, start_date = CASE task_id WHEN 'load' THEN ? "
            "ELSE start_date END WHERE run_id = 'scheduled__polled'",
            (stamp(datetime.now(timezone.utc)), stamp(NOW - timedelta(hours=1))),
        )
    session.paths.clear()
    view = reader.read(fetcher, datetime.now(timezone.utc) + timedelta(seconds=1))["slow"]
    [run] = [r for r in view.runs if r.run_id == "scheduled__polled"]
    assert {t.task_id: t.state for t in run.tasks} == {
        "extract": "success",
        "load": "running",
        "report": "running",
    }
    assert all("/dags/slow/" not in path for path in session.paths), session.paths
