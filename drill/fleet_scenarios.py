"""``--executor celery``: the drill on a two-host Celery fleet, one fault per scenario.

The fleet (:mod:`drill.fleet`) is booted once; each scenario then triggers both DAGs for a day of
its own, waits until every long task runs (worker-b holds one load of each DAG and every payment
push), strikes, waits for the runs to end, repairs what it broke and has the capabilities collect
their facts, exactly as the LocalExecutor drill does after its crash:

- ``one-scheduler`` (a): one scheduler of two SIGKILLed mid-run; the other carries on.
- ``schedulers-down`` (b): both SIGKILLed, down past the health-check threshold, then restarted.
- ``lost-worker`` (c): worker-b's whole namespace SIGKILLed mid-load. Its tasks are failed by the
  task heartbeat timeout and retried on worker-a, while their warehouse statements run on.
- ``partition`` (d): worker-b's execution-API route blackholed past the heartbeat timeout while it
  still reaches the warehouse, the store and the vendors; healed once the re-runs on worker-a end.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from drill import dags
from drill.airflow_home import component_env
from drill.components import Component, health, wait_until
from drill.fleet import HOST_A, HOST_B, HOST_B_PREFIXES, Fleet, FleetTimings, fleet_env, write_policy
from drill.fleet_report import FAULTS, HOST_FAULTS, FleetFact
from drill.redis_broker import RedisBroker
from drill.scenario import Progress, Scenario, ScenarioTimings
from drill.session import DrillSession
from drill.vendors import VENDOR_NAMES
from drill.work_meter import WorkMeter

__all__ = [
    "DEFAULT_SCENARIOS",
    "FLEET_SCENARIOS",
    "WORK_SECONDS",
    "FleetScenario",
    "boot_fleet",
    "new_scenario",
    "run_scenario",
]

FLEET_SCENARIOS = ("one-scheduler", "schedulers-down", "partition", "lost-worker")
#: What ``--executor celery`` runs without ``--scenario``.
#: The lost host comes last: no scenario follows that would need a replacement host booted.
DEFAULT_SCENARIOS = ("partition", "lost-worker")
#: Each scenario's warehouse work per load, s (``--work-seconds`` overrides): long enough that the
#: faulted statements still run when their re-runs start on the other host.
#: lost-worker: its re-run (about 30 s after the kill) finds the unit about to end and adopts it
#: (or finds it committed); partition: the re-run starts 40-55 s into the zombie's 75 s unit, waits
#: the 5 s adoption timeout, cancels it and takes over, so the zombie's write is fenced out.
WORK_SECONDS = {"one-scheduler": 40, "schedulers-down": 90, "lost-worker": 40, "partition": 75}
BOOT = ("api-server", "scheduler", "scheduler-2", "dag-processor", "triggerer")


@dataclass
class FleetScenario(Scenario):
    """A :class:`Scenario` whose executor is the Celery fleet."""

    fleet: Fleet | None = None

    @property
    def hosts(self) -> Fleet:
        assert self.fleet is not None
        return self.fleet

    def boot(self) -> None:
        """Start the components and both hosts; wait until healthy, DAGs parsed, workers answering."""
        for name in BOOT:
            self.start(name)
        for host in self.hosts.hosts.values():
            host.start()
            self.on_start(host.component)
        self.progress(f"booting {', '.join(BOOT)}, Celery workers on hosts {', '.join(self.hosts.hosts)}")

        def healthy() -> bool:
            self._check_alive()
            body: dict[str, Any] = health(self.home.api_url) or {}
            return all(
                (body.get(part) or {}).get("status") == "healthy"
                for part in ("scheduler", "dag_processor", "triggerer")
            )

        wait_until("Airflow to become healthy", healthy, self.timings.boot_timeout)
        self.hosts.wait_workers(set(self.hosts.hosts), self.timings.boot_timeout)
        self.progress(f"components healthy; Celery workers answering: {', '.join(sorted(self.hosts.hosts))}")

        def parsed() -> bool:
            self._check_alive()
            if self.api.get("/importErrors")["import_errors"]:
                raise RuntimeError(f"DAG import errors: {self.api.get('/importErrors')}")
            known = {d["dag_id"] for d in self.api.get("/dags?limit=100")["dags"]}
            return set(self.dag_ids) <= known

        wait_until("the drill DAGs to be parsed", parsed, self.timings.boot_timeout)
        self.progress(f"DAGs parsed: {', '.join(self.dag_ids)}")

    def placement(self) -> dict[str, list[str]]:
        """dag_id -> long tasks now running on worker-b; RuntimeError when placement failed."""
        found: dict[str, list[str]] = {}
        for dag_id, run_id in self.run_ids.items():
            for ti in self.api.task_instances(dag_id, run_id):
                if not self.is_long(ti["task_id"]):
                    continue
                want = HOST_B if ti["task_id"].startswith(HOST_B_PREFIXES) else HOST_A
                if ti.get("hostname") != want:
                    raise RuntimeError(f"{dag_id}.{ti['task_id']} runs on {ti.get('hostname')!r}, not {want}")
                if want == HOST_B:
                    found.setdefault(dag_id, []).append(ti["task_id"])
        return found

    def tries_started(self, tasks: dict[str, list[str]], at_least: int = 2) -> bool:
        """Every task of ``tasks`` (dag_id -> ids) started try ``at_least`` or later."""
        for dag_id, ids in tasks.items():
            tis = {t["task_id"]: t for t in self.api.task_instances(dag_id, self.run_ids[dag_id])}
            for task_id in ids:
                ti = tis[task_id]
                if ti["try_number"] < at_least or ti["state"] in (
                    None,
                    "scheduled",
                    "queued",
                    "up_for_retry",
                ):
                    return False
        return True

    def tries_ended(self, tasks: dict[str, list[str]]) -> bool:
        """Every task of ``tasks`` is past its first try and in a final state."""
        for dag_id, ids in tasks.items():
            tis = {t["task_id"]: t for t in self.api.task_instances(dag_id, self.run_ids[dag_id])}
            if any(tis[i]["try_number"] < 2 or tis[i]["state"] not in ("success", "failed") for i in ids):
                return False
        return True


def boot_fleet(drill: DrillSession, args: argparse.Namespace, progress: Progress) -> Fleet:
    """Warehouse, vendors, broker, environment, metadata DB and the fleet's processes (not started)."""
    keys = drill.keys = ["plain", "crashsafe"] if args.dags == "both" else [args.dags]
    dags_dir = drill.home.airflow_home / "dags"
    dags.install(keys, dags_dir)
    warehouse_url, conn_env, metadata_url = drill.warehouse()
    drill.warehouse_url = warehouse_url
    from drill.vendors import DrillVendors

    vendors = drill.vendors = DrillVendors.start()
    progress(f"vendors listening: naive {vendors.naive.url}, key-honouring {vendors.keyed.url}")
    broker = RedisBroker(root=drill.home.root / "redis").start()
    drill.sessions.add(broker.pid or -1)
    progress(f"throwaway redis-server on 127.0.0.1:{broker.port} (no persistence)")
    on_b = len(keys) * (args.regions + len(VENDOR_NAMES) * args.payments)
    timings = FleetTimings(
        heartbeat_timeout=args.heartbeat_timeout,
        adoption_timeout=args.adoption_timeout,
        # worker-b has exactly one slot per task placed on it: full, it takes no re-run while cut off.
        concurrency_b=on_b,
        concurrency_a=len(keys) * args.regions + on_b + 2,
    )
    base = component_env(
        drill.home,
        dags_folder=dags_dir,
        metadata_url=metadata_url,
        extra={
            **conn_env,
            **vendors.env(),
            "CRASHSAFE_DRILL_REGIONS": str(args.regions),
            "CRASHSAFE_DRILL_PAYMENTS": str(args.payments),
        },
        health_check_threshold=args.health_check_threshold,
    )
    env = fleet_env(base, broker, timings)
    write_policy(drill.home.airflow_home, list(dags.dag_ids(keys).values()))
    progress(f"AIRFLOW_HOME {drill.home.airflow_home}; migrating the metadata DB (postgresql)")
    drill.migrate(env)
    fleet = drill.fleet = Fleet(drill.home, env, broker, timings)
    fleet.host(HOST_A, ["default", "host-a"], timings.concurrency_a)
    fleet.host(HOST_B, ["default", "host-b"], timings.concurrency_b)
    return fleet


def new_scenario(
    drill: DrillSession, args: argparse.Namespace, index: int, components: dict[str, Component]
) -> FleetScenario:
    fleet = drill.fleet
    assert fleet is not None

    def make(name: str) -> Component:
        return fleet.component("scheduler" if name.startswith("scheduler") else name, name)

    day = datetime.fromisoformat(_first_day(args).replace("Z", "+00:00")) + timedelta(days=index)
    scenario = FleetScenario(
        home=drill.home,
        dag_ids=list(dags.dag_ids(drill.keys).values()),
        long_task_prefixes=(*dags.LONG_TASK_PREFIXES, dags.PUSH_PREFIX),
        logical_date=day.strftime("%Y-%m-%dT%H:%M:%SZ"),
        timings=ScenarioTimings(
            work_seconds=args.work_seconds or 60,
            kill_after=args.kill_after,
            outage=args.outage,
            health_check_threshold=args.health_check_threshold,
            boot_timeout=240.0,
        ),
        make_component=make,
        progress=drill.progress,
        components=components,
        on_start=lambda c: drill.sessions.add(c.pid or -1),
        fleet=fleet,
    )
    drill.scenario = scenario
    return scenario


def _first_day(args: argparse.Namespace) -> str:
    if args.logical_date:
        return str(args.logical_date)
    if args.warehouse_url:
        return datetime.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    return "2024-01-01T00:00:00Z"


def run_scenario(drill: DrillSession, args: argparse.Namespace, name: str, scenario: FleetScenario) -> None:
    """Trigger, wait for every long task, strike with fault ``name``, wait for the end, repair."""
    fleet, vendors, progress = scenario.hosts, drill.vendors, drill.progress
    assert vendors is not None
    vendors.reset()
    work = args.work_seconds or WORK_SECONDS[name]
    progress(f"scenario ({FAULTS[name][0]}) {name}: {FAULTS[name][1]}")
    drill.meter = WorkMeter(drill.warehouse_url).start()
    scenario.trigger({"work_seconds": work})
    pushes = len(VENDOR_NAMES) * args.payments
    scenario.wait_running(expected=(2 * args.regions + pushes) * len(drill.keys))
    wait_until(
        "every payment push to reach its vendor",
        lambda: all(vendors.received_from(d) >= pushes for d in scenario.dag_ids),
        120,
    )
    on_b = scenario.placement()
    fleet.share_queues()
    progress(
        f"placement: {sum(map(len, on_b.values()))} long tasks on {HOST_B}, the rest on {HOST_A}; "
        f"{HOST_A} now also consumes queue host-b"
    )
    side_of = {dag_id: side for side, dag_id in dags.dag_ids(drill.keys).items()}
    fact = drill.fleet_fact = FleetFact(
        scenario=name, host=HOST_B if name in HOST_FAULTS else "", fault_at=None
    )
    if fact.host:
        fact.faulted_tasks = {side_of[d]: ids for d, ids in on_b.items()}
    time.sleep(args.kill_after)
    STRIKES[name](drill, args, scenario, fact, on_b)
    scenario.wait_finished()
    drill.work = drill.meter.stop()
    fleet.unshare_queues()


def _release(drill: DrillSession) -> None:
    assert drill.vendors is not None
    drill.vendors.release.set()
    drill.progress("released the vendors' held payment pushes")


def _wait_reruns(scenario: FleetScenario, on_b: dict[str, list[str]], timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        wait_until(
            "the faulted tasks to start again on another host",
            lambda: scenario.tries_started(on_b),
            timeout,
            2.0,
        )
    started = scenario.tries_started(on_b)
    scenario.progress(
        "re-runs started on the other host" if started else "not every faulted task re-ran in time"
    )


def _lose_worker(
    drill: DrillSession,
    args: argparse.Namespace,
    scenario: FleetScenario,
    fact: FleetFact,
    on_b: dict[str, list[str]],
) -> None:
    fleet = scenario.hosts
    killed = fleet.hosts[HOST_B].lose()
    fact.fault_at = scenario.crashed_at = time.time()
    scenario.progress(f"SIGKILL host {HOST_B}: its pid namespace's init and all {killed} processes in it")
    _wait_reruns(scenario, on_b, fleet.timings.heartbeat_timeout * 4 + 120)
    _release(drill)
    scenario.wait_finished()
    if args.fleet_scenarios[-1] == "lost-worker":
        return  # nothing runs after it: no replacement host needed
    host = fleet.host(HOST_B, ["default", "host-b"], fleet.timings.concurrency_b)
    host.start()
    drill.sessions.add(host.component.pid or -1)
    fleet.wait_workers({HOST_B})
    fact.healed_at = time.time()
    scenario.progress(f"a replacement {HOST_B} host booted (new namespaces)")


def _partition(
    drill: DrillSession,
    args: argparse.Namespace,
    scenario: FleetScenario,
    fact: FleetFact,
    on_b: dict[str, list[str]],
) -> None:
    fleet = scenario.hosts
    proxy = fleet.proxies[HOST_B]
    proxy.blackhole()
    fact.fault_at = scenario.crashed_at = time.time()
    scenario.progress(
        f"partition: {HOST_B}'s execution-API route blackholed (task_instance_heartbeat_timeout "
        f"{fleet.timings.heartbeat_timeout} s); it still reaches the warehouse, store and vendors"
    )
    _wait_reruns(scenario, on_b, fleet.timings.heartbeat_timeout * 4 + 120)
    _release(drill)
    with contextlib.suppress(TimeoutError):
        wait_until(
            "the re-runs on the other host to end",
            lambda: scenario.tries_ended(on_b),
            scenario.timings.work_seconds * 3 + 120,
            2.0,
        )
    proxy.heal()
    fact.healed_at = time.time()
    fact.dropped_connections = proxy.dropped_connections
    scenario.progress(
        f"partition healed after {fact.healed_at - fact.fault_at:.0f} s ({proxy.dropped_connections} "
        "execution-API connections swallowed)"
    )


def _one_scheduler(
    drill: DrillSession,
    args: argparse.Namespace,
    scenario: FleetScenario,
    fact: FleetFact,
    on_b: dict[str, list[str]],
) -> None:
    survivors = scenario.components["scheduler"].crash()
    del survivors
    fact.fault_at = scenario.crashed_at = time.time()
    scenario.components.pop("scheduler")
    scenario.progress("SIGKILL scheduler (one of two); scheduler-2 carries on")
    time.sleep(5)
    _release(drill)
    scenario.wait_finished()
    scenario.start("scheduler")
    scenario.restarted_at = fact.healed_at = time.time()
    scenario.progress("restarted the killed scheduler")


def _schedulers_down(
    drill: DrillSession,
    args: argparse.Namespace,
    scenario: FleetScenario,
    fact: FleetFact,
    on_b: dict[str, list[str]],
) -> None:
    for name in ("scheduler", "scheduler-2"):
        scenario.components[name].crash()
        scenario.components.pop(name)
    fact.fault_at = scenario.crashed_at = time.time()
    scenario.progress(
        f"SIGKILL both schedulers; down {args.outage:.0f} s (> threshold {args.health_check_threshold} s)"
    )
    time.sleep(args.outage)
    for name in ("scheduler", "scheduler-2"):
        scenario.start(name)
    scenario.restarted_at = fact.healed_at = time.time()
    scenario.progress("restarted both schedulers")
    time.sleep(5)
    _release(drill)


STRIKES: dict[
    str, Callable[[DrillSession, argparse.Namespace, FleetScenario, FleetFact, dict[str, list[str]]], None]
] = {
    "one-scheduler": _one_scheduler,
    "schedulers-down": _schedulers_down,
    "lost-worker": _lose_worker,
    "partition": _partition,
}
