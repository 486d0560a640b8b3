"""The watchdog against real Airflow 3.3 components: real SIGKILLs, a real local HTTP webhook.

One idle Airflow (api-server, scheduler, dag-processor; PostgreSQL metadata so two schedulers can
share it) is booted for the whole module; each test crashes part of it and leaves it healthy for
the next, except the last, which kills the api-server. About 3-4 minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from drill.cluster import find_pg_bin
from drill.components import wait_until
from drill.stack import AirflowStack
from drill.watch import WatchdogProcess, WebhookReceiver

Watch = Callable[..., WebhookReceiver]

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

#: Airflow's scheduler_health_check_threshold (30) plus one default poll (10) plus delivery.
PAGE_WITHIN = 45.0
FAST = ["--interval", "2", "--threshold", "10"]
#: The graced watchdog's --grace: longer than a page (45 s) plus a restart and its resolve take.
GRACE = 180


@pytest.fixture(scope="module")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    """One booted Airflow for every test of the module; everything it started is killed after."""
    if find_pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs PostgreSQL binaries for the watchdog e2e tests", pytrace=False)
        pytest.skip("no PostgreSQL binaries for the metadata DB")
    stack = AirflowStack(str(tmp_path_factory.mktemp("watchdog-e2e")))
    try:
        stack.start()
        yield stack
    finally:
        assert stack.close() == 0, "processes of the test Airflow survived its cleanup"


@pytest.fixture
def watch(airflow: AirflowStack, tmp_path: Path) -> Iterator[Watch]:
    """Start watchdogs (each with its own webhook receiver); stop them all after the test."""
    started: list[tuple[WatchdogProcess, WebhookReceiver]] = []

    def start(name: str, *options: str, token: str | None = None) -> WebhookReceiver:
        receiver = WebhookReceiver()
        dog = WatchdogProcess(
            airflow.api_url, receiver.url, tmp_path, name=name, options=list(options), token=token
        )
        started.append((dog.start(), receiver))
        # Its first poll, which saves its state file, sees a healthy Airflow.
        wait_until(
            f"watchdog {name}'s first poll",
            (dog.log_path.parent / f"{name}-state" / "state.json").exists,
            60,
            interval=0.2,
        )
        return receiver

    yield start
    for dog, receiver in started:
        dog.stop()
        receiver.close()


def _token(api_url: str) -> str:
    with urllib.request.urlopen(f"{api_url}/auth/token", timeout=10) as resp:
        return str(json.loads(resp.read())["access_token"])


def _running_scheduler_jobs(api_url: str, token: str) -> list[dict[str, object]]:
    request = urllib.request.Request(
        f"{api_url}/api/v2/jobs?job_state=running&job_type=SchedulerJob&limit=100",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return list(json.loads(resp.read())["jobs"])


def test_scheduler_kill_pages_within_45_s_resolves_and_a_restart_inside_the_grace_pages_nobody(
    airflow: AirflowStack, watch: Watch
) -> None:
    """Default settings: SIGKILL -> critical page within 45 s; restart -> resolve. A --grace watchdog
    beside it, polling every 2 s, pages nobody: the scheduler was back within its grace."""
    receiver = watch("defaults")  # grace 0 by default: the control, the condition must show to it
    graced = watch(f"grace-{GRACE}", *FAST, "--grace", str(GRACE))
    killed = airflow.crash("scheduler")
    alert = receiver.wait_for("trigger", "scheduler_dead", after=killed, timeout=PAGE_WITHIN + 15)
    assert alert is not None, f"no page; deliveries: {[d.summary() for d in receiver.snapshot()]}"
    assert alert.alert["severity"] == "critical"
    assert alert.at - killed <= PAGE_WITHIN, f"paged {alert.at - killed:.1f} s after the SIGKILL"
    restarted = airflow.restart("scheduler")
    resolve = receiver.wait_for("resolve", "scheduler_dead", after=restarted, timeout=90)
    assert resolve is not None, "no resolve after the restart"
    print(f"SIGKILL -> page {alert.at - killed:.1f} s; restart -> resolve {resolve.at - restarted:.1f} s")
    airflow.wait_healthy()
    time.sleep(4)  # two more polls of the graced watchdog on a healthy Airflow
    assert time.time() - killed < GRACE, "the restart took longer than the grace: nothing proved"
    assert graced.snapshot() == []


def test_two_schedulers_one_killed_warns_not_pages(airflow: AirflowStack, watch: Watch) -> None:
    """HA: one of two schedulers dies -> a warning about that replica; nothing critical."""
    token = _token(airflow.api_url)

    def heartbeating() -> list[dict[str, object]]:
        now = datetime.now(timezone.utc)
        return [
            job
            for job in _running_scheduler_jobs(airflow.api_url, token)
            if job.get("latest_heartbeat")
            and (now - datetime.fromisoformat(str(job["latest_heartbeat"]))).total_seconds() < 10
        ]

    # The scheduler restarted by the previous test must have its job row before the snapshot, or
    # its late row would be taken for the second scheduler's.
    wait_until("the running scheduler's job to heartbeat", heartbeating, 90)
    before = {job["id"] for job in _running_scheduler_jobs(airflow.api_url, token)}
    airflow.launch("scheduler", "scheduler2")

    def second_job() -> list[dict[str, object]]:
        return [j for j in _running_scheduler_jobs(airflow.api_url, token) if j["id"] not in before]

    job_id = wait_until("the second scheduler's job", second_job, 90)[0]["id"]
    # A 20 s threshold: on a loaded 2-core machine a live scheduler's heartbeat can lag past 10 s,
    # and this test is about which replica died, not about detection speed.
    receiver = watch("ha", "--interval", "2", "--threshold", "20", token=token)
    killed = airflow.crash("scheduler2")
    warning = receiver.wait_for("trigger", f"scheduler_replica_dead:{job_id}", after=killed, timeout=60)
    assert warning is not None, (
        f"no replica warning for job {job_id}; got {[d.summary() for d in receiver.snapshot()]}; "
        f"running scheduler jobs now: {_running_scheduler_jobs(airflow.api_url, token)}"
    )
    assert warning.alert["severity"] == "warning"
    time.sleep(4)
    pages = [d.summary() for d in receiver.snapshot() if d.alert.get("severity") == "critical"]
    assert pages == []


def test_wrong_api_token_is_a_blind_spot_and_once_exits_1(airflow: AirflowStack, tmp_path: Path) -> None:
    """A wrong token is refused by the real jobs endpoint: a "monitoring blind spot" alert, exit 1."""
    receiver = WebhookReceiver()
    dog = WatchdogProcess(
        airflow.api_url, receiver.url, tmp_path, name="wrong-token", options=["--once"], token="not-a-token"
    )
    try:
        proc = dog.start().proc
        assert proc is not None
        code = proc.wait(timeout=60)
        alert = receiver.wait_for("trigger", "blind_spot:jobs", timeout=5)
    finally:
        dog.stop()
        receiver.close()
    assert code == 1, dog.log_path.read_text()
    assert alert is not None, f"no blind-spot alert; got {[d.summary() for d in receiver.snapshot()]}"
    # Airflow 3.3 answers an invalid token with 403 in "all admins" mode, 401 otherwise.
    assert any(f"answers HTTP {status}" in alert.alert["summary"] for status in (401, 403))


def test_api_server_kill_pages(airflow: AirflowStack, watch: Watch) -> None:
    """An unreachable api-server is itself a critical page (the watchdog is blind), not silence."""
    receiver = watch("api", *FAST)
    killed = airflow.crash("api-server")
    alert = receiver.wait_for("trigger", "api_unreachable", after=killed, timeout=30)
    assert alert is not None, f"no page; got {[d.summary() for d in receiver.snapshot()]}"
    assert alert.alert["severity"] == "critical"
