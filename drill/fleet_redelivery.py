"""Scenario (e) ``redelivery``: a worker host killed after receiving its tasks, before they start.

With ``task_acks_late`` (Airflow's default) a Celery message is acknowledged only when its task
ends, so a worker lost after receiving it leaves it unacknowledged and the broker (Redis) hands it
to another worker once ``visibility_timeout`` has passed: the same try, delivered twice.

The drill makes that window wide and certain rather than racing for it: both hosts run with a
20 s visibility timeout; worker-b's route to the execution API is blackholed *before* the DAGs
are triggered, so each task process worker-b forks after receiving its message waits on its
``ti_run`` call (the start Airflow records) and never registers; once worker-b holds every message
routed to it, its whole namespace is SIGKILLed and worker-a takes over its queue. What happens
next is measured, not assumed: how many messages Redis redelivered, how many tries each hit task
made and on which host, and how often each guard spoke — the api-server refusing a second start
of a running try (``ti_run``: 409 "invalid state") and the Celery provider then ignoring the
message ("Task already running elsewhere, ignoring redelivered message").
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from drill import dags
from drill.components import wait_until
from drill.fleet import HOST_A, HOST_B, HOST_B_PREFIXES, Fleet
from drill.fleet_report import FleetFact

if TYPE_CHECKING:
    from drill.fleet_faults import Hit
    from drill.fleet_scenarios import FleetScenario
    from drill.session import DrillSession

__all__ = ["REDELIVERY_VISIBILITY", "after_loss", "guard_counts", "receive_then_lose"]

#: The broker's visibility timeout in (e), s: an unacknowledged message is delivered again after it.
REDELIVERY_VISIBILITY = 20
#: Log lines that count each path a delivery took (summed over every log of the drill).
MARKERS = {
    "received": "Executing workload in Celery",
    "provider_ignored": "ignoring redelivered message",
    "api_refused_second_start": "Cannot start Task Instance in invalid state",
    "api_duplicate_start_same_process": "Duplicate start request received",
}


def guard_counts(fleet: Fleet) -> dict[str, dict[str, int]]:
    """log -> marker -> count, over the workers' and the api-server's logs."""
    found: dict[str, dict[str, int]] = {}
    for path in sorted(fleet.home.logs.glob("*.log")):
        if not path.name.startswith(("worker-", "api-server")):
            continue
        text = path.read_text(errors="replace")
        counts = {name: text.count(marker) for name, marker in MARKERS.items() if marker in text}
        if counts:
            found[path.name] = counts
    return found


def _received(fleet: Fleet) -> int:
    host = fleet.hosts[HOST_B]
    try:
        return host.component.log_path.read_text(errors="replace").count(MARKERS["received"])
    except OSError:
        return 0


def _hit_tasks(scenario: FleetScenario) -> dict[str, list[str]]:
    """dag_id -> the long tasks routed to worker-b (its queue), whatever their state now."""
    return {
        dag_id: [
            ti["task_id"]
            for ti in scenario.api.task_instances(dag_id, run_id)
            if scenario.is_long(ti["task_id"]) and ti["task_id"].startswith(HOST_B_PREFIXES)
        ]
        for dag_id, run_id in scenario.run_ids.items()
    }


def _states(scenario: FleetScenario, tasks: dict[str, list[str]]) -> dict[str, int]:
    states: dict[str, int] = {}
    for dag_id, ids in tasks.items():
        for ti in scenario.api.task_instances(dag_id, scenario.run_ids[dag_id]):
            if ti["task_id"] in ids:
                states[str(ti["state"])] = states.get(str(ti["state"]), 0) + 1
    return states


def receive_then_lose(
    drill: DrillSession, args: argparse.Namespace, scenario: FleetScenario, fact: FleetFact, work: int
) -> dict[str, list[str]]:
    """Trigger with worker-b cut off from the execution API, lose it once it holds its messages.

    Returns dag_id -> the tasks it held (the hit tasks); the caller waits for the runs to end.
    """
    fleet, progress = scenario.hosts, drill.progress
    proxy = fleet.proxies[HOST_B]
    proxy.blackhole()
    progress(f"{HOST_B}'s execution-API route blackholed before the trigger: its tasks cannot register")
    scenario.trigger({"work_seconds": work})
    want = fleet.timings.concurrency_b
    try:
        wait_until(f"{HOST_B} to receive its {want} messages", lambda: _received(fleet) >= want, 180, 1.0)
    except TimeoutError:
        progress(f"{HOST_B} received {_received(fleet)} of {want} messages in 180 s; striking anyway")
    time.sleep(3)  # its task processes fork and call ti_run, which the blackhole swallows
    held = _hit_tasks(scenario)
    before = _states(scenario, held)
    killed = fleet.hosts[HOST_B].lose()
    fact.fault_at = scenario.crashed_at = time.time()
    side_of = {dag_id: side for side, dag_id in dags.dag_ids(drill.keys).items()}
    fact.faulted_tasks = {side_of[d]: ids for d, ids in held.items()}
    progress(
        f"SIGKILL host {HOST_B} ({killed} processes) holding {_received(fleet)} received, unacknowledged "
        f"messages; its tasks' states then: {before}"
    )
    fact.notes.append(
        f"{HOST_B} received {_received(fleet)} messages and was lost before any of its tasks registered "
        f"with the api-server (states at the kill: {before})"
    )
    proxy.heal()
    fleet.share_queues()
    progress(
        f"{HOST_A} now consumes queue host-b; waiting for Redis to redeliver "
        f"(visibility_timeout {REDELIVERY_VISIBILITY} s)"
    )
    return held


def _tries(scenario: FleetScenario, tasks: dict[str, list[str]]) -> dict[str, list[str]]:
    """task -> the host of each of its tries, oldest first (Airflow's record)."""
    found = {}
    for dag_id, ids in tasks.items():
        for task_id in ids:
            tries = scenario.api.tries(dag_id, scenario.run_ids[dag_id], task_id)
            found[task_id] = [str(t.get("hostname") or "?") for t in tries]
    return found


def after_loss(hit: Hit) -> None:
    """Wait for the redelivered tasks to run and the runs to end; count each guard; reboot the hosts."""
    drill, args, scenario, fact, on_b = hit
    fleet = scenario.hosts
    assert drill.vendors is not None

    def started() -> bool:
        return "queued" not in _states(scenario, on_b)

    try:
        wait_until("the held messages to be redelivered", started, REDELIVERY_VISIBILITY + 180, 2.0)
        after = time.time() - (fact.fault_at or 0)
        scenario.progress(
            f"redelivered: every task {HOST_B} held started on {HOST_A}, {after:.0f} s after the kill"
        )
    except TimeoutError:
        scenario.progress(f"not every held message was redelivered: {_states(scenario, on_b)}")
    time.sleep(10)  # pushes reach the vendors
    drill.vendors.release.set()
    scenario.progress("released the vendors' held payment pushes")
    scenario.wait_finished()
    fact.healed_at = time.time()
    counts = guard_counts(fleet)
    tries = _tries(scenario, on_b)
    twice = sorted(t for t, hosts in tries.items() if len(hosts) > 1)
    listed = "; ".join(f"{t}: {' -> '.join(h)}" for t, h in sorted(tries.items()))
    fact.notes.append(f"tries per hit task (hosts): {listed}")
    fact.notes.append(f"guards, per log: {counts or 'none spoke'}")
    fact.notes.append(
        f"{len(twice)} hit task(s) ran more than one try" + (f": {', '.join(twice)}" if twice else "")
    )
    if args.fleet_scenarios[-1] != "redelivery":
        for component in fleet.reboot_workers():
            drill.sessions.add(component.pid or -1)
        scenario.progress("a replacement worker-b and worker-a rebooted with the usual visibility_timeout")
