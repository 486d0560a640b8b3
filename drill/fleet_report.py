"""Capability: the fleet. Which host each interrupted task ran on, and what its fault did to it.

Only Celery drills (``--executor celery``) record it: the scenario's fault, the host it hit, and
per side the tasks whose first try ran there. From Airflow's record of every attempt (hostname
included) it reports whether each such task ran again on another host, how long the faulted
attempt lived on after its successor started (a partitioned worker is a zombie that keeps
working), and, for crashsafe, how many of the faulted host's late writes its fences refused.

The promises judged here are crashsafe's on a fleet (see docs/fleet.md): a task whose host was
lost or partitioned ran again on another host and the slot still has exactly one committed
write by the newest attempt (that part is :mod:`drill.writes`'); on a partition, the overlap of
the zombie and its successor is measured, not assumed away.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from drill.attempts import TaskFact, overlaps
from drill.fleet_watch import Watched

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession

__all__ = [
    "FleetFact",
    "collect",
    "header",
    "held",
    "host_moves",
    "invariants",
    "rows",
    "section",
]

#: Scenario name -> (letter, what the fault is).
FAULTS = {
    "one-scheduler": ("a", "one scheduler of two SIGKILLed mid-run"),
    "schedulers-down": ("b", "both schedulers down past the health threshold, then restarted"),
    "lost-worker": ("c", "a worker host lost (its whole namespace SIGKILLed) mid-load"),
    "partition": (
        "d",
        "a worker partitioned from the api-server past the task heartbeat timeout, then healed",
    ),
    "redelivery": (
        "e",
        "a worker host killed after receiving its tasks, before they started: the broker redelivers them",
    ),
}
#: Scenarios whose fault hits a worker host's tasks.
HOST_FAULTS = ("lost-worker", "partition", "redelivery")
#: ... and those after which the hit tasks must run again on another host (a redelivered task may
#: run again anywhere, its first host included).
MOVING_FAULTS = ("lost-worker", "partition")


@dataclass
class FleetFact:
    """One fleet scenario's fault and where the tasks ran."""

    scenario: str
    #: The host the fault hit ("" for scheduler faults).
    host: str
    fault_at: float | None
    #: When the fault ended: partition healed, schedulers restarted (None: never, host lost).
    healed_at: float | None = None
    #: side -> task ids whose first try ran on the faulted host.
    faulted_tasks: dict[str, list[str]] = field(default_factory=dict)
    #: Connections the partition swallowed (execution-API calls that went nowhere).
    dropped_connections: int = 0
    notes: list[str] = field(default_factory=list)
    #: log file -> its size when the scenario began (its guards are counted past it).
    log_offsets: dict[str, int] = field(default_factory=dict)
    #: What the watchdog beside the fleet alerted after the fault (None: no watchdog ran).
    watched: Watched | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> FleetFact:
        watched = raw.get("watched")
        return cls(**{**raw, "watched": Watched.from_json(watched) if watched else None})


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M:%S UTC")


def header(fleet: FleetFact) -> str:
    """The report's first line for a fleet scenario."""
    letter, what = FAULTS.get(fleet.scenario, ("?", fleet.scenario))
    line = f"Fleet drill ({letter}) {fleet.scenario}: {what}"
    line += f"; fault at {_when(fleet.fault_at)}"
    if fleet.healed_at is not None and fleet.fault_at is not None:
        line += f", ended {fleet.healed_at - fleet.fault_at:.0f} s later"
    return line


def host_moves(task: TaskFact) -> list[str]:
    """The hosts of the task's attempts, oldest first (``?`` where Airflow recorded none)."""
    return [a.hostname or "?" for a in task.attempts]


def _faulted(facts: DrillFacts, side: str) -> list[TaskFact]:
    dag = facts.dag(side)
    if dag is None or facts.fleet is None:
        return []
    wanted = set(facts.fleet.faulted_tasks.get(side, []))
    return [t for t in dag.tasks if t.task_id in wanted]


def _moved(task: TaskFact, host: str) -> bool:
    hosts = host_moves(task)
    return bool(hosts) and hosts[0] == host and any(h not in (host, "?") for h in hosts[1:])


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    fleet = facts.fleet
    if fleet is None or not fleet.host:
        return {}
    tasks = _faulted(facts, side)
    if fleet.scenario == "redelivery":
        return _redelivered_rows(facts, side, tasks, fleet.host)
    moved = [t for t in tasks if _moved(t, fleet.host)]
    ov = [o for t in tasks for o in overlaps(t)]
    found = {
        f"tasks hit on {fleet.host}": str(len(tasks)),
        "re-ran on another host": f"{len(moved)}/{len(tasks)}",
        "faulted attempt alive after re-run began": f"{len(ov)} (max {max(ov):.1f} s)" if ov else "0",
    }
    dag = facts.dag(side)
    if dag is not None and dag.fences is not None:
        hit = {t.task_id for t in tasks}
        found["its late writes refused by fence"] = str(
            sum(f.rejected_count for f in dag.fences if f.task_id in hit)
        )
    return found


def _redelivered_rows(facts: DrillFacts, side: str, tasks: list[TaskFact], host: str) -> dict[str, str]:
    """(e): the host was lost holding its messages before its tasks registered."""
    elsewhere = [t for t in tasks if host_moves(t) and host not in host_moves(t)]
    twice = [t for t in tasks if len(t.attempts) > 1]
    ov = [o for t in tasks for o in overlaps(t)]
    return {
        f"tasks {host} held when lost": str(len(tasks)),
        "redelivered, ran only on the other host": f"{len(elsewhere)}/{len(tasks)}",
        "hit tasks run more than once": f"{len(twice)}" + (f" (overlap max {max(ov):.1f} s)" if ov else ""),
    }


def section(facts: DrillFacts) -> list[str]:
    fleet = facts.fleet
    if fleet is None:
        return []
    lines = ["Fleet: hosts of every attempt of the tasks the fault hit (oldest first):"]
    for side in ("plain", "crashsafe"):
        for task in _faulted(facts, side):
            lines.append(f"  {task.task_id} ({side}): {' -> '.join(host_moves(task))} [{task.final_state}]")
    if fleet.dropped_connections:
        lines.append(f"  the partition swallowed {fleet.dropped_connections} execution-API connections")
    lines += [f"  {n}" for n in fleet.notes]
    return lines


def invariants(facts: DrillFacts) -> list[str]:
    fleet = facts.fleet
    if fleet is None or fleet.scenario not in HOST_FAULTS:
        return []
    tasks = _faulted(facts, "crashsafe")
    broken = []
    if not tasks:
        broken.append(f"no crashsafe task ran on {fleet.host} when the fault hit")
    stayed = [t.task_id for t in tasks if not _moved(t, fleet.host)]
    if stayed and fleet.scenario in MOVING_FAULTS:
        broken.append(f"not re-run on another host after the fault on {fleet.host}: " + ", ".join(stayed))
    if fleet.scenario == "partition":
        if not any(overlaps(t) for t in tasks):
            broken.append("no overlap of a zombie and its successor was measured in the partition")
        broken += _zombie_writes(facts, tasks)
    return broken


def _zombie_writes(facts: DrillFacts, tasks: list[TaskFact]) -> list[str]:
    """A successor that committed while its zombie still ran must have seen the zombie's write refused.

    In a partition the zombie reaches the warehouse: when its successor takes the slot over (the
    adoption timeout cancels the zombie's unit) the fence must refuse the zombie's write, which the
    fence row counts. A successor that adopted the zombie's commit instead has nothing to refuse.
    """
    dag = facts.crashsafe
    if dag is None or dag.fences is None:
        return []
    by_task = {f.task_id: f for f in dag.fences}
    broken = []
    for task in tasks:
        fence = by_task.get(task.task_id)
        if fence is None or len(task.attempts) < 2 or not overlaps(task):
            continue
        took_over = fence.committed_try is not None and fence.committed_try > task.attempts[0].try_number
        if took_over and fence.rejected_count == 0 and task.attempts[0].outcome != "fenced_out":
            broken.append(f"{task.task_id}: the zombie's write was not refused after its successor took over")
    return broken


def held(facts: DrillFacts) -> list[str]:
    fleet = facts.fleet
    if fleet is None or fleet.scenario not in HOST_FAULTS:
        return []
    text = (
        f"every task hit on {fleet.host} re-ran on another host," if fleet.scenario in MOVING_FAULTS else ""
    )
    if fleet.scenario == "partition":
        text += " the zombie's overlap with its successor measured,"
        fences = facts.crashsafe.fences if facts.crashsafe is not None else None
        refused = sum(f.rejected_count for f in fences or [])
        if refused:
            text += f" {refused} late zombie write(s) refused by the fence,"
    return [text] if text else []


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """The running fleet scenario's record (nothing for a LocalExecutor drill)."""
    facts.fleet = getattr(session, "fleet_fact", None)
