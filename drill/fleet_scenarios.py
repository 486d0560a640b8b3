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
- ``redelivery`` (e): both hosts on a 20 s ``visibility_timeout``; worker-b lost after receiving
  its messages, before its tasks registered (:mod:`drill.fleet_redelivery`); Redis redelivers them.

The watchdog runs beside the fleet (:mod:`drill.fleet_watch`): (a) must warn, (b) must page.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from drill import dags
from drill.airflow_home import component_env
from drill.components import Component, health, wait_until
from drill.fleet import HOST_A, HOST_B, HOST_B_PREFIXES, Fleet, FleetTimings, fleet_env, write_policy
from drill.fleet_faults import STRIKES, Hit
from drill.fleet_redelivery import REDELIVERY_VISIBILITY, receive_then_lose
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

FLEET_SCENARIOS = ("one-scheduler", "schedulers-down", "partition", "redelivery", "lost-worker")
#: What ``--executor celery`` runs without ``--scenario``.
#: The lost host comes last: no scenario follows that would need a replacement host booted.
DEFAULT_SCENARIOS = ("partition", "lost-worker")
#: Each scenario's warehouse work per load, s (``--work-seconds`` overrides): long enough that the
#: faulted statements still run when their re-runs start on the other host.
#: lost-worker: its re-run (about 30 s after the kill) finds the unit about to end and adopts it
#: (or finds it committed); partition: the re-run starts 40-55 s into the zombie's 75 s unit, waits
#: the 5 s adoption timeout, cancels it and takes over, so the zombie's write is fenced out.
WORK_SECONDS = {
    "one-scheduler": 40,
    "schedulers-down": 90,
    "lost-worker": 40,
    "partition": 75,
    "redelivery": 75,
}
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
    if name == "redelivery":
        visibility = {
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": str(REDELIVERY_VISIBILITY)
        }
        for component in fleet.reboot_workers(visibility):
            drill.sessions.add(component.pid or -1)
        progress(
            f"both hosts rebooted with visibility_timeout {REDELIVERY_VISIBILITY} s (< the loads' {work} s)"
        )
    drill.meter = WorkMeter(drill.warehouse_url).start()
    fact = drill.fleet_fact = FleetFact(
        scenario=name, host=HOST_B if name in HOST_FAULTS else "", fault_at=None
    )
    if name == "redelivery":
        on_b = receive_then_lose(drill, args, scenario, fact, work)  # strikes before the tasks start
    else:
        on_b = _start_then_place(drill, args, scenario, fact, work)
        time.sleep(args.kill_after)
    STRIKES[name](Hit(drill, args, scenario, fact, on_b))
    scenario.wait_finished()
    drill.work = drill.meter.stop()
    fleet.unshare_queues()


def _start_then_place(
    drill: DrillSession, args: argparse.Namespace, scenario: FleetScenario, fact: FleetFact, work: int
) -> dict[str, list[str]]:
    """Trigger, wait until every long task runs where placed; dag_id -> those running on worker-b."""
    fleet, vendors, progress = scenario.hosts, drill.vendors, drill.progress
    assert vendors is not None
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
    if fact.host:
        fact.faulted_tasks = {side_of[d]: ids for d, ids in on_b.items()}
    return on_b
