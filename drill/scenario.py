"""The crash itself: boot, trigger, SIGKILL the scheduler mid-run, restart it late, wait for the end.

The timings follow what Airflow 3.3 does (docs/design.md, "How Airflow behaves on a crash"): only
tasks still running when the restarted scheduler comes up are reset, and only if it comes back
more than ``scheduler_health_check_threshold`` after its predecessor died. So the drill waits
until every long task runs, kills a few seconds later, and keeps the scheduler down longer than
the threshold while the tasks' work outlives the outage.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from drill.airflow_home import DrillHome
from drill.components import Component, health, wait_until
from drill.waiting import Ticker, sleep_reporting

__all__ = ["Api", "Progress", "Scenario", "ScenarioTimings"]

TERMINAL_RUN_STATES = {"success", "failed"}
#: What the drill boots; the triggerer hosts crashsafe re-runs waiting to adopt in-flight work.
BOOTED = ("api-server", "scheduler", "dag-processor", "triggerer")


class Progress:
    """One line per phase, with seconds since the drill started."""

    def __init__(self, echo: Callable[[str], None] = print) -> None:
        self.started = time.monotonic()
        self.echo = echo

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str) -> None:
        self.echo(f"[{self.elapsed():6.1f}s] {message}")
        sys.stdout.flush()

    def waiting(self, what: str, status: Callable[[], str | None] | None = None) -> Ticker:
        """A ticker printing, through this progress, a line at least every 10 s of a wait."""
        return Ticker(self, what, status)


class Api:
    """The few REST calls the drill needs (SimpleAuthManager with all-admins: no login)."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.base_url}/api/v2{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as resp:
            return json.loads(resp.read() or b"null")

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        run = urllib.parse.quote(run_id, safe="")
        return list(self.get(f"/dags/{dag_id}/dagRuns/{run}/taskInstances?limit=1000")["task_instances"])

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        run = urllib.parse.quote(run_id, safe="")
        return list(self.get(f"/dags/{dag_id}/dagRuns/{run}/taskInstances/{task_id}/tries")["task_instances"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.get(f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")["state"])


@dataclass(frozen=True)
class ScenarioTimings:
    """How the crash is timed, in seconds; the e2e test shortens everything, including the threshold."""

    #: How long each load works in the warehouse: it must outlive the outage.
    work_seconds: int = 300
    #: From "every long task runs" to the SIGKILL.
    kill_after: float = 10.0
    #: How long the scheduler stays down: longer than the threshold, or nothing is reset.
    outage: float = 40.0
    health_check_threshold: int = 30
    boot_timeout: float = 180.0
    #: How long the runs may take to finish after the restart (None: three loads' work + 180 s).
    finish_timeout: float | None = None


@dataclass
class Scenario:
    """Runs the crash against components started from ``make_component``."""

    home: DrillHome
    dag_ids: list[str]
    long_task_prefixes: tuple[str, ...]
    logical_date: str
    timings: ScenarioTimings
    make_component: Callable[[str], Component]
    progress: Progress
    components: dict[str, Component] = field(default_factory=dict)
    run_ids: dict[str, str] = field(default_factory=dict)
    crashed_at: float | None = None
    restarted_at: float | None = None
    on_start: Callable[[Component], None] = lambda _c: None

    @property
    def api(self) -> Api:
        return Api(self.home.api_url)

    def start(self, name: str) -> Component:
        component = self.make_component(name)
        component.start()
        self.on_start(component)
        self.components[name] = component
        return component

    def _check_alive(self) -> None:
        for component in self.components.values():
            if not component.alive():
                raise RuntimeError(f"{component.name} exited:\n{component.tail()}")

    def boot(self) -> None:
        """Start the components; wait until they are healthy and both DAGs are parsed."""
        for name in BOOTED:
            self.start(name)
        self.progress(f"booting {', '.join(BOOTED)} (LocalExecutor)")

        def healthy() -> bool:
            self._check_alive()
            body: dict[str, Any] = health(self.home.api_url) or {}
            return all(
                (body.get(part) or {}).get("status") == "healthy"
                for part in ("scheduler", "dag_processor", "triggerer")
            )

        what = "Airflow to become healthy"
        wait_until(what, healthy, self.timings.boot_timeout, tick=self.progress.waiting(what))
        self.progress("components healthy")

        def parsed() -> bool:
            self._check_alive()
            errors = self.api.get("/importErrors")["import_errors"]
            if errors:
                raise RuntimeError(f"DAG import errors: {json.dumps(errors, indent=1)[:2000]}")
            known = {d["dag_id"] for d in self.api.get("/dags?limit=100")["dags"]}
            return set(self.dag_ids) <= known

        what = "the drill DAGs to be parsed"
        wait_until(what, parsed, self.timings.boot_timeout, tick=self.progress.waiting(what))
        self.progress(f"DAGs parsed: {', '.join(self.dag_ids)}")

    def trigger(self, conf: dict[str, Any]) -> None:
        for dag_id in self.dag_ids:
            run_id = f"drill__{self.logical_date}"
            body = {"dag_run_id": run_id, "logical_date": self.logical_date, "conf": conf}
            self.api.call("POST", f"/dags/{dag_id}/dagRuns", body)
            self.run_ids[dag_id] = run_id
        self.progress(f"triggered {len(self.dag_ids)} runs for {self.logical_date} ({conf})")

    def long_tasks(self) -> list[dict[str, Any]]:
        tis = []
        for dag_id, run_id in self.run_ids.items():
            tis += [ti for ti in self.api.task_instances(dag_id, run_id) if self.is_long(ti["task_id"])]
        return tis

    def is_long(self, task_id: str) -> bool:
        return task_id.startswith(self.long_task_prefixes)

    def task_status(self) -> str:
        """How far the triggered runs are: tasks done of total, how many run or are deferred now."""
        tis = []
        for dag_id, run_id in self.run_ids.items():
            tis += self.api.task_instances(dag_id, run_id)
        done = sum(ti["state"] in ("success", "failed", "skipped", "upstream_failed") for ti in tis)
        running = sum(ti["state"] == "running" for ti in tis)
        deferred = sum(ti["state"] == "deferred" for ti in tis)  # re-runs waiting to adopt
        return f"tasks {done}/{len(tis)} done, {running} running" + (
            f", {deferred} deferred" if deferred else ""
        )

    def wait_running(self, expected: int) -> None:
        """Wait until every long task runs (they must all be caught mid-work by the crash)."""

        def all_running() -> bool:
            self._check_alive()
            tis = self.long_tasks()
            running = sum(ti["state"] == "running" for ti in tis)
            if any(ti["state"] in ("failed", "upstream_failed") for ti in tis):
                raise RuntimeError("a load failed before the crash; see the task logs")
            return running >= expected

        what = f"{expected} loads to run"
        tick = self.progress.waiting(what, self.task_status)
        wait_until(what, all_running, self.timings.boot_timeout + expected * 5, tick=tick)
        self.progress(f"{expected} tasks running")

    def crash_and_restart(self) -> None:
        """SIGKILL the scheduler, stay down longer than the health threshold, restart it."""
        sleep_reporting(
            self.timings.kill_after, self.progress.waiting("the moment to crash", self.task_status)
        )
        scheduler = self.components["scheduler"]
        survivors = scheduler.crash()
        self.crashed_at = time.time()
        self.progress(f"SIGKILL scheduler (pid {scheduler.pid}); {len(survivors)} worker processes survive")
        self.progress(
            f"waiting {self.timings.outage:.0f} s (> scheduler_health_check_threshold "
            f"{self.timings.health_check_threshold} s)"
        )
        sleep_reporting(self.timings.outage, self.progress.waiting("the outage to pass", self.task_status))
        self.start("scheduler")
        self.restarted_at = time.time()
        self.progress("restarting scheduler")

    def wait_reset(self, release: Callable[[], None], timeout: float = 180.0) -> int:
        """Wait until the restarted scheduler reset the interrupted loads and runs them again.

        Then ``release()`` lets the vendors answer the held payment pushes. The loads' work is not
        cut short: the stale attempts' statements run to their end (a plain autocommit INSERT
        commits a second copy) while plain re-runs redo the whole job and crashsafe re-runs wait
        to adopt it, so the redone work is measured, not truncated.
        """

        def rerunning() -> list[dict[str, Any]]:
            self._check_alive()
            return [ti for ti in self.long_tasks() if ti["try_number"] > 1]

        def all_rerunning() -> bool:
            tis, again = self.long_tasks(), rerunning()
            started = [ti for ti in again if ti["state"] not in (None, "scheduled", "queued")]
            return bool(tis) and len(started) == len(tis)

        what = "the restarted scheduler to reset and re-run the loads"
        with contextlib.suppress(TimeoutError):
            wait_until(what, all_rerunning, timeout, tick=self.progress.waiting(what, self.task_status))
        count = len(rerunning())
        if count:
            self.progress(f"reset observed: {count} loads started again (new try, new ti.id)")
        else:
            self.progress("no reset observed: the loads finished before the scheduler came back")
        release()
        self.progress("released the vendors' held payment pushes")
        return count

    def wait_finished(self) -> dict[str, str]:
        timeout = self.timings.finish_timeout or self.timings.work_seconds * 3 + 180

        def finished() -> dict[str, str] | None:
            self._check_alive()
            states = {dag_id: self.api.run_state(dag_id, run) for dag_id, run in self.run_ids.items()}
            return states if set(states.values()) <= TERMINAL_RUN_STATES else None

        what = "the DAG runs to finish"
        tick = self.progress.waiting(what, self.task_status)
        states = wait_until(what, finished, timeout, interval=2.0, tick=tick)
        assert states is not None  # wait_until returns only a truthy result
        self.progress("runs finished: " + ", ".join(f"{d} {s}" for d, s in states.items()))
        return states
