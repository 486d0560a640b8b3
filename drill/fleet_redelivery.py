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
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from drill import dags
from drill.components import wait_until
from drill.fleet import HOST_A, HOST_B, Fleet
from drill.fleet_report import FleetFact

if TYPE_CHECKING:
    from drill.fleet_faults import Hit
    from drill.fleet_scenarios import FleetScenario
    from drill.session import DrillSession

__all__ = ["REDELIVERY_VISIBILITY", "after_loss", "guard_counts", "log_offsets", "receive_then_lose"]

#: The broker's visibility timeout in (e), s: an unacknowledged message is delivered again after it.
REDELIVERY_VISIBILITY = 20
#: How long after its first message worker-b may wait for the others before it is killed, s.
HOLD_SECONDS = 15
#: Log lines that count each path a delivery took (summed over every log of the drill).
MARKERS = {
    "received": "Executing workload in Celery",
    "provider_ignored": "ignoring redelivered message",
    "api_refused_second_start": "Cannot start Task Instance in invalid state",
    "api_duplicate_start_same_process": "Duplicate start request received",
}


def _logs(fleet: Fleet) -> list[Path]:
    return [
        path
        for path in sorted(fleet.home.logs.glob("*.log"))
        if path.name.startswith(("worker-", "api-server"))
    ]


def log_offsets(fleet: Fleet) -> dict[str, int]:
    """Where each worker and api-server log ends now: :func:`guard_counts` counts only what follows."""
    return {path.name: path.stat().st_size for path in _logs(fleet)}


def guard_counts(fleet: Fleet, since: dict[str, int]) -> dict[str, dict[str, int]]:
    """log -> marker -> count, over the workers' and the api-server's logs past ``since``."""
    found: dict[str, dict[str, int]] = {}
    for path in _logs(fleet):
        with path.open("rb") as log:
            log.seek(since.get(path.name, 0))
            text = log.read().decode(errors="replace")
        counts = {name: text.count(marker) for name, marker in MARKERS.items() if marker in text}
        for state in _REFUSED.findall(text):  # what the try already was when a start was refused
            key = f"api_refused_start_when_{state}"
            counts[key] = counts.get(key, 0) + 1
        counts.pop("api_refused_second_start", None)
        if counts:
            found[path.name] = counts
    return found


_REFUSED = re.compile(r"Cannot start Task Instance in invalid state.*?previous_state=(\w+)")
_WORKLOAD = re.compile(r"task_id='([^']+)', dag_id='([^']+)', run_id='[^']*', try_number=(\d+)")


def _received(fleet: Fleet) -> dict[str, set[str]]:
    """dag_id -> the tasks whose message worker-b received (its worker's log, this boot)."""
    held: dict[str, set[str]] = {}
    try:
        text = fleet.hosts[HOST_B].component.log_path.read_text(errors="replace")
    except OSError:
        return held
    for line in text.splitlines():
        if MARKERS["received"] in line and (found := _WORKLOAD.search(line)):
            held.setdefault(found.group(2), set()).add(found.group(1))
    return held


def _count(held: dict[str, set[str]]) -> int:
    return sum(map(len, held.values()))


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
    # worker-b takes only the tasks placed on it (no shared ``default`` task may hang there).
    fleet.celery().control.cancel_consumer(
        "default", destination=[f"celery@{HOST_B}"], reply=True, timeout=5.0
    )
    proxy = fleet.proxies[HOST_B]
    proxy.blackhole()
    progress(f"{HOST_B} consumes host-b only; its execution-API route blackholed before the trigger")
    fact.log_offsets = log_offsets(fleet)
    scenario.trigger({"work_seconds": work})
    want = fleet.timings.concurrency_b
    first: list[float] = []

    def holds_all() -> bool:
        got = _count(_received(fleet))
        if got and not first:
            first.append(time.monotonic())
        # A blackholed ti_run gives up after about 30 s ([workers] execution_api_timeout and
        # retries): strike well before, with what it holds by then.
        return got >= want or bool(first and time.monotonic() - first[0] > HOLD_SECONDS)

    try:
        wait_until(f"{HOST_B} to receive its {want} messages", holds_all, 180, 1.0)
    except TimeoutError:
        progress(f"{HOST_B} received nothing in 180 s; striking anyway")
    time.sleep(2)  # its task processes fork and call ti_run, which the blackhole swallows
    received = _received(fleet)
    held = {dag_id: sorted(ids) for dag_id, ids in received.items() if dag_id in scenario.run_ids}
    before = _states(scenario, held)
    killed = fleet.hosts[HOST_B].lose()
    fact.fault_at = scenario.crashed_at = time.time()
    side_of = {dag_id: side for side, dag_id in dags.dag_ids(drill.keys).items()}
    fact.faulted_tasks = {side_of[d]: ids for d, ids in held.items()}
    progress(
        f"SIGKILL host {HOST_B} ({killed} processes) holding {_count(received)} received, unacknowledged "
        f"messages (of the {want} placed there); their tasks' states then: {before}"
    )
    fact.notes.append(
        f"{HOST_B} received {_count(received)} of the {want} messages placed on it and was lost before any "
        f"of those tasks registered with the api-server (their states at the kill: {before})"
    )
    proxy.heal()
    fleet.share_queues()
    progress(
        f"{HOST_A} now consumes queue host-b; waiting for Redis to redeliver "
        f"(visibility_timeout {REDELIVERY_VISIBILITY} s)"
    )
    return held


def _tries(scenario: FleetScenario, tasks: dict[str, list[str]]) -> dict[str, list[str]]:
    """dag_id.task_id -> the host of each of its tries, oldest first (Airflow's record)."""
    found = {}
    for dag_id, ids in tasks.items():
        for task_id in ids:
            tries = scenario.api.tries(dag_id, scenario.run_ids[dag_id], task_id)
            found[f"{dag_id}.{task_id}"] = [str(t.get("hostname") or "?") for t in tries]
    return found


def after_loss(hit: Hit) -> None:
    """Wait for the redelivered tasks to run and the runs to end; count each guard; reboot the hosts."""
    drill, args, scenario, fact, on_b = hit
    fleet = scenario.hosts
    assert drill.vendors is not None
    struck = time.monotonic()  # called right after the kill (a wall clock may step meanwhile)

    def started() -> bool:
        return "queued" not in _states(scenario, on_b)

    try:
        wait_until("the held messages to be redelivered", started, REDELIVERY_VISIBILITY + 180, 2.0)
        after = time.monotonic() - struck
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
    counts = guard_counts(fleet, fact.log_offsets)
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
