"""The drill's report: each capability's rows side by side, its sections below, then the verdict.

Pure functions of :class:`~drill.facts.DrillFacts`; nothing here touches a process or a database.
The plain DAG's damage is expected and only reported; a broken invariant of the crashsafe side
makes the drill exit non-zero, and a crash that interrupted no load proves nothing.
"""

from __future__ import annotations

from datetime import datetime, timezone

from drill import alerting, audit, fleet_report, fleet_watch, payments, work, writes
from drill.attempts import STOPPED_FOR_PERSON, stopped_for_person
from drill.capability import Capability
from drill.dags import SIDE_TITLES
from drill.facts import DrillFacts

__all__ = ["CAPABILITIES", "all_broken", "inconclusive", "render"]

#: Every capability under drill, in the order it is collected and reported: writes come first
#: (the others read the tasks they recorded).
CAPABILITIES: tuple[Capability, ...] = (writes, payments, audit, work, alerting, fleet_report, fleet_watch)


def all_broken(facts: DrillFacts) -> list[str]:
    """Every broken crashsafe invariant, capability by capability."""
    if facts.crashsafe is None:
        return []
    return [broken for capability in CAPABILITIES for broken in capability.invariants(facts)]


def inconclusive(facts: DrillFacts) -> list[str]:
    """Reasons the drill proved nothing (the crash did not interrupt any load)."""
    reasons = []
    for dag in (facts.plain, facts.crashsafe):
        if dag is not None and not any(len(t.attempts) >= 2 for t in dag.long_tasks()):
            reasons.append(f"{dag.dag_id}: no load was reset; the crash interrupted nothing")
    return reasons


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "?"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M:%S UTC")


def _table(facts: DrillFacts) -> list[str]:
    columns = [
        (title, {name: value for c in CAPABILITIES for name, value in c.rows(facts, side).items()})
        for side, title in SIDE_TITLES.items()
        if facts.dag(side) is not None
    ]
    names = list(dict.fromkeys(name for _, rows in columns for name in rows))
    width = max(len(n) for n in names) + 2
    col = max([24, *(len(v) + 2 for _, rows in columns for v in rows.values())])
    lines = [" " * width + "".join(title.ljust(col) for title, _ in columns).rstrip()]
    for name in names:
        values = "".join(rows.get(name, "").ljust(col) for _, rows in columns)
        lines.append((name.ljust(width) + values).rstrip())
    return lines


def _verdict(facts: DrillFacts) -> list[str]:
    """Broken invariants, or what held; why a run stopped for a person ended failed."""
    if facts.crashsafe is None:
        return []
    broken = all_broken(facts)
    stopped = [t.task_id for t in facts.crashsafe.tasks if stopped_for_person(t)]
    if broken:
        lines = ["CRASHSAFE INVARIANTS BROKEN:", *(f"  - {b}" for b in broken)]
    else:
        held = [line for capability in CAPABILITIES for line in capability.held(facts)]
        lines = (
            [f"Crashsafe invariants hold: {held[0]}", *held[1:]] if held else ["Crashsafe invariants hold:"]
        )
        lines.append(
            "every task ended success" + (f" except {len(stopped)} {STOPPED_FOR_PERSON}." if stopped else ".")
        )
    if stopped:
        lines.append(
            f"The crashsafe run ends {facts.crashsafe.run_state} on purpose: "
            + ", ".join(stopped)
            + " pushed to a vendor that ignores idempotency keys and the reset attempt cannot know "
            "whether the first attempt's payment went through; it refuses to pay again "
            "(OutcomeUnknown). Check with the vendor, then `airflow-crashsafe ledger resolve`."
        )
    return lines


def render(facts: DrillFacts) -> str:
    """The side-by-side text report."""
    down = (
        f"{facts.restarted_at - facts.crashed_at:.0f} s"
        if facts.crashed_at is not None and facts.restarted_at is not None
        else "?"
    )
    title = f"Crash drill: scheduler SIGKILLed at {_when(facts.crashed_at)}, down {down}, then restarted"
    lines = [
        fleet_report.header(facts.fleet) if facts.fleet is not None else title,
        "",
        *_table(facts),
        "",
    ]
    for capability in CAPABILITIES:
        section = capability.section(facts)
        if section:
            lines += [*section, ""]
    lines += _verdict(facts)
    lines += [f"Note: {n}" for n in (*inconclusive(facts), *facts.notes)]
    if facts.wall_seconds:
        lines.append(f"Drill wall time: {facts.wall_seconds:.0f} s")
    return "\n".join(lines)
