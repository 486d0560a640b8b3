"""The fleet drill's faults, one function per scenario (:data:`STRIKES`), run once every long task runs.

Each strikes, records when (:class:`~drill.fleet_report.FleetFact`), releases the vendors' held
payment pushes once the re-runs started, and repairs what it broke when a scenario follows (a
replacement host, rebooted workers); see :mod:`drill.fleet_scenarios` for the scenarios.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from drill import fleet_redelivery, fleet_watch
from drill.components import wait_until
from drill.fleet import HOST_B
from drill.fleet_report import FleetFact
from drill.session import DrillSession

if TYPE_CHECKING:
    from drill.fleet_scenarios import FleetScenario

__all__ = ["STRIKES", "Hit"]


class Hit(NamedTuple):
    """What a fault strikes: the drill, its options, the scenario, its record, worker-b's tasks."""

    drill: DrillSession
    args: argparse.Namespace
    scenario: FleetScenario
    fact: FleetFact
    #: dag_id -> the long tasks running on worker-b when the fault hits.
    on_b: dict[str, list[str]]


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


def _lose_worker(hit: Hit) -> None:
    drill, args, scenario, fact, on_b = hit
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


def _partition(hit: Hit) -> None:
    drill, _args, scenario, fact, on_b = hit
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


def _await_watchdog(drill: DrillSession, scenario_name: str, since: float, timeout: float) -> None:
    """Wait (bounded) for the watchdog's verdict on a scheduler fault before repairing it."""
    args = drill.args
    if drill.receiver is None:
        return
    what = "warning 'one replica down'" if scenario_name == "one-scheduler" else "page 'scheduler dead'"
    got = fleet_watch.wait_verdict(drill.receiver, scenario_name, after=since, timeout=max(0.0, timeout))
    drill.progress(
        f"watchdog {what}: {got.summary()} ({got.at - since:.0f} s after the kill)"
        if got
        else f"watchdog {what}: none within {args.watch_threshold} s threshold + two polls"
    )


def _one_scheduler(hit: Hit) -> None:
    drill, args, scenario, fact, _on_b = hit
    survivors = scenario.components["scheduler"].crash()
    del survivors
    fact.fault_at = scenario.crashed_at = time.time()
    scenario.components.pop("scheduler")
    scenario.progress("SIGKILL scheduler (one of two); scheduler-2 carries on")
    time.sleep(5)
    _release(drill)
    scenario.wait_finished()
    # The killed replica is restarted only once the watchdog has had its say about it.
    wait = fleet_watch.verdict_wait(args.watch_threshold, args.watch_interval)
    _await_watchdog(drill, "one-scheduler", fact.fault_at, fact.fault_at + wait - time.time())
    scenario.start("scheduler")
    scenario.restarted_at = fact.healed_at = time.time()
    scenario.progress("restarted the killed scheduler")


def _schedulers_down(hit: Hit) -> None:
    drill, args, scenario, fact, _on_b = hit
    for name in ("scheduler", "scheduler-2"):
        scenario.components[name].crash()
        scenario.components.pop(name)
    fact.fault_at = scenario.crashed_at = time.time()
    scenario.progress(
        f"SIGKILL both schedulers; down {args.outage:.0f} s (> threshold {args.health_check_threshold} s)"
    )
    time.sleep(args.outage)
    wait = fleet_watch.verdict_wait(args.watch_threshold, args.watch_interval)
    _await_watchdog(drill, "schedulers-down", fact.fault_at, fact.fault_at + wait - time.time())
    for name in ("scheduler", "scheduler-2"):
        scenario.start(name)
    scenario.restarted_at = fact.healed_at = time.time()
    scenario.progress("restarted both schedulers")
    time.sleep(5)
    _release(drill)


STRIKES: dict[str, Callable[[Hit], None]] = {
    "one-scheduler": _one_scheduler,
    "schedulers-down": _schedulers_down,
    "lost-worker": _lose_worker,
    "partition": _partition,
    "redelivery": fleet_redelivery.after_loss,
}
