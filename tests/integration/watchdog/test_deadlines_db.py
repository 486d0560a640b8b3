"""Deadlines with ``--db-url`` on Airflow's real metadata schema, the scheduler dead, real CLI processes.

The DAG is serialized by Airflow's own serializer into ``serialized_dag``; runs, task instances and
the dead scheduler's ``job`` row are inserted as Airflow writes them. Each watchdog is the real
``airflow-crashsafe watch --once`` process, delivering to webhook and PagerDuty-shaped receivers
served locally. ``at`` is a time of day in UTC a few minutes from the real clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tests.integration.watchdog.wedging import execute
from tests.support.httpserver import Reply, Server, serve
from tests.support.watch_starts import watching_since

pytestmark = pytest.mark.integration

DAG_ID = "nightly"
RUN_ID = "scheduled__tonight"
TASKS = {"extract": ["load"], "load": ["report"], "report": []}
#: Recent successful durations: extract 20 min, load 30 min, report 10 min (median of three).
HISTORY = {"extract": [1200.0, 1100.0, 1300.0], "load": [1800.0] * 3, "report": [600.0] * 3}


def serialized_dag() -> dict[str, Any]:
    """The DAG as Airflow 3.3.2's own serializer writes it to ``serialized_dag.data``."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG(DAG_ID, schedule="0 0 * * *") as dag:
        ops = {task: EmptyOperator(task_id=task) for task in TASKS}
        for task, downstream in TASKS.items():
            for child in downstream:
                ops[task] >> ops[child]
    data: dict[str, Any] = DagSerialization.to_dict(dag)
    return data


def add_run(
    url: str, run_id: str, after: datetime, state: str, tasks: dict[str, tuple[str, datetime | None]]
) -> None:
    """A dag_run and its task instances (``tasks``: task id -> (state, start))."""
    ended = max((s for _, s in tasks.values() if s), default=None) if state == "success" else None
    execute(
        url,
        "INSERT INTO dag_run (dag_id, run_id, run_type, state, run_after, logical_date, start_date, "
        "end_date) VALUES (%s, %s, 'scheduled', %s, %s, %s, %s, %s)",
        (DAG_ID, run_id, state, after, after, after, ended),
    )
    for task, (ti_state, start) in tasks.items():
        execute(
            url,
            "INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, try_number, pool, "
            "pool_slots, state, start_date) VALUES (%s, %s, %s, %s, -1, 1, 'default_pool', 1, %s, %s)",
            (uuid.uuid4(), task, DAG_ID, run_id, ti_state, start),
        )


def set_run_state(url: str, run_id: str, state: str) -> None:
    execute(url, "UPDATE dag_run SET state = %s, end_date = now() WHERE run_id = %s", (state, run_id))
    execute(url, "UPDATE task_instance SET state = %s WHERE run_id = %s", (state, run_id))


@pytest.fixture
def airflow_db(metadata_db: str) -> str:
    """The metadata DB with the nightly DAG serialized, three past successful runs and a dead scheduler."""
    now = datetime.now(timezone.utc)
    version = uuid.uuid4()
    execute(metadata_db, "INSERT INTO dag_bundle (name) VALUES ('dags-folder') ON CONFLICT DO NOTHING")
    # dag.partition_mapper_info is Airflow 3.3's (NOT NULL there); the floor release (3.2) lacks it.
    has_partitions = execute(
        metadata_db,
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'dag' AND column_name = %s",
        ("partition_mapper_info",),
    )
    execute(
        metadata_db,
        "INSERT INTO dag (dag_id, is_paused, is_stale, bundle_name, timetable_type, "
        + ("partition_mapper_info, " if has_partitions else "")
        + "max_active_tasks, max_consecutive_failed_dag_runs, has_task_concurrency_limits) "
        "VALUES (%s, false, false, 'dags-folder', 'cron', "
        + ("'null', " if has_partitions else "")
        + "16, 0, false)",
        (DAG_ID,),
    )
    execute(
        metadata_db,
        "INSERT INTO dag_version (id, version_number, dag_id, created_at, last_updated) "
        "VALUES (%s, 1, %s, now(), now())",
        (version, DAG_ID),
    )
    execute(
        metadata_db,
        "INSERT INTO serialized_dag (id, dag_id, created_at, last_updated, dag_hash, dag_version_id, data) "
        "VALUES (%s, %s, now(), now(), 'h', %s, %s)",
        (uuid.uuid4(), DAG_ID, version, json.dumps(serialized_dag())),
    )
    for day in range(3):
        run_id = f"scheduled__past{day}"
        after = now - timedelta(days=5 + day)
        add_run(metadata_db, run_id, after, "success", dict.fromkeys(TASKS, ("success", after)))
        for task, durations in HISTORY.items():
            execute(
                metadata_db,
                "UPDATE task_instance SET duration = %s, end_date = start_date + make_interval(secs => %s) "
                "WHERE run_id = %s AND task_id = %s",
                (durations[day], durations[day], run_id, task),
            )
    execute(
        metadata_db,
        "INSERT INTO job (job_type, state, start_date, latest_heartbeat, hostname) "
        "VALUES ('SchedulerJob', 'running', now() - interval '2 hours', now() - interval '10 minutes', "
        "'sched')",
    )
    return metadata_db


@pytest.fixture
def receivers() -> Iterator[tuple[Server, Server]]:
    """(webhook, PagerDuty-shaped) receivers recording every request."""
    with (
        serve(lambda _r: Reply(200, {})) as webhook,
        serve(lambda _r: Reply(202, {"status": "success"})) as pd,
    ):
        yield webhook, pd


def config(tmp_path: Path, at: datetime, receivers: tuple[Server, Server], claim_dir: Path | None) -> Path:
    """A watch config with the nightly deadline at ``at`` (UTC, minute precision) and both sinks."""
    webhook, pagerduty = receivers
    watch: dict[str, Any] = {"expect_triggerer": "no", "expect_dag_processor": "no", "instance": "prod"}
    watch["deadline_keep"] = 7200  # yesterday's deadline (whose run is not in this DB) is not watched
    if claim_dir is not None:
        watch["deadline_claim_dir"] = str(claim_dir)
    data = {
        "watch": watch,
        "sinks": [
            {"type": "webhook", "name": "hook", "url": webhook.url + "/hook", "min_severity": "info"},
            {
                "type": "pagerduty",
                "name": "pd",
                "routing_key": "k",
                "url": pagerduty.url + "/v2/enqueue",
                "min_severity": "info",
            },
        ],
        "deadlines": [{"dag_id": DAG_ID, "at": at.strftime("%H:%M"), "timezone": "UTC"}],
    }
    path = tmp_path / f"watch-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(data))
    return path


def watch(url: str, cfg: Path, state_dir: Path, *, fresh: bool = False) -> subprocess.Popen[str]:
    """One ``airflow-crashsafe watch --once`` process (the real CLI, no Airflow imported).

    Unless ``fresh``, its state says it has watched ``cfg``'s deadlines for three hours (as if it
    had been running), so a deadline a minute past passed while it watched.
    """
    if not fresh and not (state_dir / "deadlines.json").exists():
        watching_since(cfg, state_dir, datetime.now(timezone.utc) - timedelta(hours=3))
    argv = [sys.executable, "-m", "airflow_crashsafe.watchdog.cli", "--once", "--db-url", url]
    argv += ["--config", str(cfg), "--state-dir", str(state_dir)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), err[-2000:]


def deadline_alerts(server: Server) -> list[dict[str, Any]]:
    """Deadline alerts a receiver got: webhook bodies, or PagerDuty events reduced to the same keys."""
    out = []
    for request in server.requests:
        body = request.json()
        if "routing_key" in body:  # PagerDuty Events v2
            body = {"dedup_key": body["dedup_key"], "event": body["event_action"], **body.get("payload", {})}
        if ":deadline_" in body["dedup_key"]:
            out.append(body)
    return out


def minute(delta: timedelta) -> datetime:
    return (datetime.now(timezone.utc) + delta).replace(second=0, microsecond=0)


def test_dead_scheduler_past_the_deadline_pages_and_success_resolves(
    airflow_db: str, receivers: tuple[Server, Server], tmp_path: Path
) -> None:
    """The run is stuck behind a dead scheduler: past its deadline it pages; its success resolves it."""
    deadline = minute(timedelta(minutes=-1))
    start = deadline - timedelta(hours=2)
    add_run(
        airflow_db,
        RUN_ID,
        deadline - timedelta(hours=3),
        "running",
        {
            "extract": ("success", start),
            "load": ("running", start + timedelta(minutes=20)),
            "report": (None, None),
        },
    )
    cfg = config(tmp_path, deadline, receivers, None)
    finish(watch(airflow_db, cfg, tmp_path / "a"))
    webhook, _ = receivers
    [missed] = deadline_alerts(webhook)
    assert missed["event"] == "trigger"
    assert "deadline_missed" in missed["dedup_key"]
    assert missed["details"]["run_id"] == RUN_ID
    assert missed["details"]["run_state"] == "running"
    assert [t["task_id"] for t in missed["details"]["critical_path"]] == [
        "report"
    ]  # load ran past its median
    assert any("scheduler_dead" in r.json().get("dedup_key", "") for r in webhook.requests)
    set_run_state(airflow_db, RUN_ID, "success")
    finish(watch(airflow_db, cfg, tmp_path / "a"))
    resolved = deadline_alerts(webhook)[1]
    assert (resolved["event"], resolved["dedup_key"]) == ("resolve", missed["dedup_key"])


def test_fresh_watchdog_pages_only_deadlines_that_pass_while_it_watches(
    airflow_db: str, receivers: tuple[Server, Server], tmp_path: Path
) -> None:
    """New rules: one passed a minute ago stays silent; one passing between two --once polls pages."""
    passed = minute(timedelta(minutes=-1))
    soon = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=4)
    add_run(airflow_db, RUN_ID, passed - timedelta(hours=3), "running", {"extract": ("running", passed)})
    cfg = config(tmp_path, passed, receivers, None)
    data = json.loads(cfg.read_text())
    data["deadlines"].append(
        {"dag_id": DAG_ID, "name": "soon", "at": soon.strftime("%H:%M:%S"), "timezone": "UTC"}
    )
    data["deadlines"][0]["early"] = data["deadlines"][1]["early"] = False
    cfg.write_text(json.dumps(data))
    finish(watch(airflow_db, cfg, tmp_path / "a", fresh=True))
    assert deadline_alerts(receivers[0]) == []
    starts = json.loads((tmp_path / "a" / "deadlines.json").read_text())["rules"]
    assert len(starts) == 2
    assert all(datetime.fromisoformat(r["since"]) < soon for r in starts.values()), "first poll came too late"
    time.sleep(max(0.0, (soon - datetime.now(timezone.utc)).total_seconds()) + 0.5)
    finish(watch(airflow_db, cfg, tmp_path / "a"))
    [missed] = deadline_alerts(receivers[0])
    assert (missed["event"], missed["details"]["deadline"]) == ("trigger", "soon")


def test_slow_run_is_paged_early_with_the_critical_path(
    airflow_db: str, receivers: tuple[Server, Server], tmp_path: Path
) -> None:
    """40 min before the deadline, 50 min of work is left on the critical path: paged now, not later."""
    deadline = minute(timedelta(minutes=40))
    now = datetime.now(timezone.utc)
    add_run(
        airflow_db,
        RUN_ID,
        deadline - timedelta(hours=3),
        "running",
        {"extract": ("running", now - timedelta(minutes=10)), "load": (None, None), "report": (None, None)},
    )
    finish(watch(airflow_db, config(tmp_path, deadline, receivers, None), tmp_path / "a"))
    [early] = deadline_alerts(receivers[0])
    assert "deadline_at_risk" in early["dedup_key"]
    assert "will miss its deadline" in early["summary"]
    assert [t["task_id"] for t in early["details"]["critical_path"]] == ["extract", "load", "report"]
    forecast = datetime.fromisoformat(early["details"]["forecast_finish"])
    assert forecast - now == pytest.approx(timedelta(minutes=10 + 30 + 10), abs=timedelta(seconds=30))
    assert forecast > deadline


def test_run_done_before_its_deadline_is_skipped(
    airflow_db: str, receivers: tuple[Server, Server], tmp_path: Path
) -> None:
    """A run that succeeded before its deadline pages nothing, before or after the deadline."""
    deadline = minute(timedelta(minutes=-1))
    start = deadline - timedelta(hours=2)
    add_run(
        airflow_db, RUN_ID, deadline - timedelta(hours=3), "success", dict.fromkeys(TASKS, ("success", start))
    )
    finish(watch(airflow_db, config(tmp_path, deadline, receivers, None), tmp_path / "a"))
    assert deadline_alerts(receivers[0]) == []


@pytest.mark.parametrize("shared_claims", [False, True])
def test_two_watchdogs_page_once(
    airflow_db: str, receivers: tuple[Server, Server], tmp_path: Path, shared_claims: bool
) -> None:
    """Two replicas at once: one dedup key (PagerDuty opens one incident); with a claim dir, one delivery."""
    deadline = minute(timedelta(minutes=-1))
    cfg = config(tmp_path, deadline, receivers, tmp_path / "claims" if shared_claims else None)
    finish(*(watch(airflow_db, cfg, tmp_path / name) for name in ("a", "b")))
    webhook, pagerduty = receivers
    pd_events = deadline_alerts(pagerduty)
    assert {e["dedup_key"] for e in pd_events} == {pd_events[0]["dedup_key"]}  # one PagerDuty incident
    assert len(deadline_alerts(webhook)) == (1 if shared_claims else 2)
    assert len(pd_events) == (1 if shared_claims else 2)


def test_airflow_deadline_rows_page_from_the_db(
    airflow_db: str, receivers: tuple[Server, Server], tmp_path: Path
) -> None:
    """With --db-url, a passed ``deadline`` row of a running run pages; its success resolves."""
    now = datetime.now(timezone.utc)
    add_run(
        airflow_db,
        RUN_ID,
        now - timedelta(hours=2),
        "running",
        {"extract": ("running", now), "load": (None, None)},
    )
    callback = uuid.uuid4()
    execute(
        airflow_db,
        "INSERT INTO callback (id, type, fetch_method, data, priority_weight, created_at) "
        "VALUES (%s, 'triggerer', 'import_path', '{}', 1, now())",
        (callback,),
    )
    execute(
        airflow_db,
        "INSERT INTO deadline (id, created_at, last_updated_at, dagrun_id, deadline_time, missed, "
        "callback_id) SELECT %s, now(), now(), id, now() - interval '1 minute', false, %s "
        "FROM dag_run WHERE run_id = %s",
        (uuid.uuid4(), callback, RUN_ID),
    )
    cfg = tmp_path / "airflow.json"
    webhook, _ = receivers
    cfg.write_text(
        json.dumps(
            {
                "watch": {
                    "expect_triggerer": "no",
                    "expect_dag_processor": "no",
                    "watch_airflow_deadlines": True,
                },
                "sinks": [{"type": "webhook", "url": webhook.url + "/hook", "min_severity": "info"}],
            }
        )
    )
    finish(watch(airflow_db, cfg, tmp_path / "a"))
    [missed] = deadline_alerts(webhook)
    assert missed["details"]["deadline"] == "airflow:deadline"
    assert missed["details"]["run_id"] == RUN_ID
    set_run_state(airflow_db, RUN_ID, "success")
    finish(watch(airflow_db, cfg, tmp_path / "a"))
    assert [a["event"] for a in deadline_alerts(webhook)] == ["trigger", "resolve"]
