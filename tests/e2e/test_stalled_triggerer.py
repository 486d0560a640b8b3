"""A triggerer that heartbeats but runs no trigger, in a real Airflow 3.3 (apache/airflow #65286).

SIGSTOP of the whole triggerer stops its heartbeat too (that is the "no triggerer" case). The
stall that hides is the trigger runner's: the triggerer's main process keeps heartbeating while
its TriggerRunner subprocess, the asyncio loop that runs every trigger, is frozen. Airflow 3.2.2+
notices a silent runner after ``[triggerer] runner_health_check_threshold`` (30 s) and then stops
heartbeating; with that check off (0, as before 3.2.2), or within its window, the api-server calls
the triggerer healthy while nothing runs. Here it is off, and the runner is SIGSTOPped:

- the watchdog's canary (a DAG whose step defers through the triggerer) misses and pages
  "scheduling stalled", while no heartbeat alert fires;
- a fenced SQL re-run finding its predecessor's unit in flight defers (the triggerer heartbeats),
  gets no answer, and instead of sitting deferred for its adoption timeout (10 min here) it is
  resumed at the deferral's timeout and waits in the worker (``adoption_without_triggerer``),
  adopting the unit's commit when it ends; its log says so.

One booted Airflow (api-server, scheduler, dag-processor, triggerer, LocalExecutor); about 2.5 min.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil
import pytest
import requests

from airflow_crashsafe.testing.context import fake_context
from drill.cluster import airflow_conn_uri, find_pg_bin
from drill.components import wait_until
from drill.stack import AirflowStack
from drill.watch import WatchdogProcess, WebhookReceiver
from tests.support.adoption import executions, in_thread, overwrite_op, setup, wait_running
from tests.support.sql_target import SqlTarget

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(420)]

CANARY = "stall_canary"
RERUN = "stall_rerun"
PARTITION = "stall-e2e"  # the slot both tries of the load share
UNIT_SECONDS = 40.0  # how long try 1's unit runs server-side
ANSWER_SECONDS = 4  # [crashsafe] triggerer_answer_seconds: the deferral times out at 8 s
CANARY_MAX_AGE = 30

DAGS = f'''
from datetime import datetime

from airflow.sdk import DAG

from airflow_crashsafe.dags.alerting import AlertingSettings
from airflow_crashsafe.dags.round_trip import TriggererRoundTrip
from tests.support.adoption import overwrite_op
from tests.support.sql_target import SqlTarget

with DAG("{CANARY}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    TriggererRoundTrip(
        task_id="triggerer_round_trip",
        settings=AlertingSettings(dag_id="{CANARY}", expect_triggerer="yes"),
    )

with DAG("{RERUN}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    overwrite_op(
        SqlTarget(conn_id="crashsafe_target", url="", dialect="postgresql"),
        0.1,
        slot_partition="{PARTITION}",
        adoption_timeout=600,
        adoption_without_triggerer="wait",
    )
'''


class Api:
    """The api-server's REST API (all_admins: no credentials)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()

    def get(self, path: str) -> Any:
        response = self.http.get(self.url + path, timeout=15)
        response.raise_for_status()
        return response.json()

    def trigger(self, dag_id: str) -> str:
        response = self.http.post(
            f"{self.url}/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None}, timeout=15
        )
        assert response.status_code == 200, f"trigger {dag_id}: {response.status_code} {response.text[:300]}"
        return str(response.json()["dag_run_id"])

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        ti = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}")
        return ti.get("state")


def _runner_of(triggerer_pid: int) -> psutil.Process:
    """The TriggerRunner subprocess (the event loop running triggers) of the triggerer process."""
    children = psutil.Process(triggerer_pid).children()
    assert len(children) == 1, f"expected the trigger runner alone under the triggerer: {children}"
    return children[0]


def _task_log(stack: AirflowStack, dag_id: str, run_id: str) -> str:
    """Every log file the run's task instances wrote, concatenated."""
    base = stack.home.airflow_home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(base.rglob("*.log")))


def _until_state(api: Api, dag_id: str, run_id: str, task_id: str, wanted: set[str], timeout: float) -> str:
    seen: list[str | None] = []

    def check() -> str | None:
        state = api.task_state(dag_id, run_id, task_id)
        if not seen or seen[-1] != state:
            seen.append(state)
        return state if state in wanted else None

    try:
        return str(wait_until(f"{dag_id}.{task_id} to be {wanted}", check, timeout, interval=1))
    except Exception as exc:
        raise AssertionError(f"{dag_id}.{task_id} went through {seen}, never {wanted}") from exc


def test_stalled_triggerer_pages_via_the_canary_and_the_rerun_does_not_sit_deferred(
    tmp_path: Path, postgres_url: str, airflow_conn: Callable[[str, str], str]
) -> None:
    """Runner SIGSTOPped, heartbeat fresh: canary pages (no heartbeat alert); re-run waits in the worker."""
    if find_pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs PostgreSQL binaries for the stalled-triggerer e2e test", pytrace=False)
        pytest.skip("no PostgreSQL binaries for the metadata DB")
    began = time.monotonic()
    target = SqlTarget(airflow_conn("crashsafe_target", postgres_url), postgres_url, "postgresql")
    airflow_conn("crashsafe_default", postgres_url)  # one store for try 1 here and the re-run there
    setup(target)
    stack = AirflowStack(str(tmp_path))
    stack.extra_env = {
        "AIRFLOW_CONN_CRASHSAFE_TARGET": airflow_conn_uri(postgres_url),
        "AIRFLOW_CONN_CRASHSAFE_DEFAULT": airflow_conn_uri(postgres_url),
        "AIRFLOW__CRASHSAFE__TRIGGERER_ANSWER_SECONDS": str(ANSWER_SECONDS),
        "AIRFLOW__TRIGGERER__RUNNER_HEALTH_CHECK_THRESHOLD": "0",  # the stall stays hidden
        "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "2",
    }
    dag_file = tmp_path / "stall_dags.py"
    dag_file.write_text(DAGS)
    stack.add_dag(dag_file)
    receiver = WebhookReceiver()
    dog: WatchdogProcess | None = None
    runner: psutil.Process | None = None
    api = Api(stack.api_url)
    try:
        stack.start()
        triggerer = stack.launch("triggerer")
        wait_until(
            "the triggerer to heartbeat",
            lambda: (stack.health().get("triggerer") or {}).get("status") == "healthy",
            90,
        )
        for dag_id in (CANARY, RERUN):

            def parsed(d: str = dag_id) -> bool:
                return api.http.get(f"{api.url}/api/v2/dags/{d}", timeout=15).ok

            wait_until(f"DAG {dag_id} parsed", parsed, 90)
        # The api-server builds its execution API on the first request to it, holding its event
        # loop meanwhile (a minute on a loaded machine): build it now, not under the first task.
        api.http.get(f"{api.url}/execution/health", timeout=240)
        booted = time.monotonic() - began

        # A healthy triggerer answers the canary's deferral: its run succeeds.
        first = api.trigger(CANARY)
        _until_state(api, CANARY, first, "triggerer_round_trip", {"success"}, 60)
        receiver_options = ["--interval", "2", "--expect-triggerer", "yes", "--canary-dag-id", CANARY]
        receiver_options += ["--canary-max-age", str(CANARY_MAX_AGE)]
        token = str(api.get("/auth/token")["access_token"])  # all_admins hands one out
        dog = WatchdogProcess(
            stack.api_url, receiver.url, tmp_path, name="stall", options=receiver_options, token=token
        )
        dog.start()

        # Stall the runner; try 1's unit is in flight when the re-run starts.
        assert triggerer.pid is not None
        runner = _runner_of(triggerer.pid)
        runner.send_signal(signal.SIGSTOP)
        stalled = time.time()
        try_1, outcome = in_thread(
            overwrite_op(target, UNIT_SECONDS, slot_partition=PARTITION),
            fake_context(dag_id=RERUN, task_id="load_revenue", try_number=1, ti_id="ti-1"),
        )
        wait_running(target.url)
        unit_started = time.monotonic()
        rerun = api.trigger(RERUN)
        second = api.trigger(CANARY)

        _until_state(api, RERUN, rerun, "load_revenue", {"deferred"}, 60)
        _until_state(api, CANARY, second, "triggerer_round_trip", {"deferred"}, 60)
        page = receiver.wait_for("trigger", "scheduling_stalled", after=stalled, timeout=CANARY_MAX_AGE + 40)
        health = stack.health()
        assert page is not None, f"no canary page; got {[d.summary() for d in receiver.snapshot()]}"
        assert page.alert["severity"] == "critical"
        assert (health.get("triggerer") or {}).get("status") == "healthy", health  # the stall hides
        assert api.task_state(CANARY, second, "triggerer_round_trip") == "deferred"  # still missed
        assert not [d.summary() for d in receiver.snapshot() if d.key.startswith("triggerer")]

        state = _until_state(api, RERUN, rerun, "load_revenue", {"success", "failed"}, 90)
        rerun_took = time.monotonic() - unit_started
        try_1.join(30)
        log = _task_log(stack, RERUN, rerun)
        assert state == "success", log[-3000:]
        assert "deferring to the triggerer" in log
        assert f"did not answer the last deferral within {2 * ANSWER_SECONDS} s: stalled?" in log
        assert "adoption_without_triggerer='wait': waiting in this worker" in log
        assert "adopted the work of try 1" in log
        assert outcome.get("result", {}).get("rows") == 2, outcome
        assert executions(target) == 1  # the re-run adopted: the load ran once
        assert rerun_took < UNIT_SECONDS + 30, f"re-run ended {rerun_took:.0f} s after the unit began"

        runner.send_signal(signal.SIGCONT)  # the stalled canary's trigger runs again
        runner = None
        _until_state(api, CANARY, second, "triggerer_round_trip", {"success"}, 60)
        print(
            f"boot {booted:.0f} s; canary page {page.at - stalled:.0f} s after the stall; re-run "
            f"done {rerun_took:.0f} s after try 1's unit began ({UNIT_SECONDS:.0f} s unit); "
            f"total {time.monotonic() - began:.0f} s"
        )
    finally:
        if runner is not None:
            runner.send_signal(signal.SIGCONT)
        if dog is not None:
            dog.stop()
        receiver.close()
        api.http.close()
        # Component and task logs, kept for a post-mortem (the stack's home is removed).
        shutil.copytree(stack.home.task_logs, tmp_path / "kept-logs", dirs_exist_ok=True)
        shutil.copytree(stack.home.logs, tmp_path / "kept-logs", dirs_exist_ok=True)
        left = stack.close()
        assert left == 0, "processes of the test Airflow survived its cleanup"
