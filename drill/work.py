"""Capability: the work meter. Warehouse work needed, redone and adopted, measured server-side.

Airflow's attempt times cannot say how much warehouse work a reset cost (the abandoned attempt's
statement runs on inside PostgreSQL), so this section reports what
:class:`~drill.work_meter.WorkMeter` saw: per DAG, executions of the long
warehouse job, the seconds the night needed, the seconds redone (and their share of the needed
ones) and the seconds a re-run adopted instead of redoing; per task, the ones that ran more than
once or adopted work. Definitions are :class:`~drill.work_meter.TaskWork`'s.

:class:`WorkReport` round-trips through the drill's facts JSON (:meth:`WorkReport.to_facts`,
:meth:`WorkReport.from_facts`), so the section renders from recorded facts like the rest of the
report. Crashsafe's re-runs should adopt in-flight work instead of redoing it (docs/design.md,
"Server-side unit and adoption"); the section shows it, and the e2e test pins it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from drill.dags import SIDE_TITLES, dag_ids
from drill.table import align
from drill.work_meter import Coverage, DagWork, MeterResult, TaskWork, summarize

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession
    from drill.writes import DagFacts

__all__ = [
    "WorkReport",
    "collect",
    "held",
    "invariants",
    "rerun_starts",
    "rows",
    "section",
]


def rerun_starts(dag: DagFacts) -> dict[str, float]:
    """``dag_id/task_id`` -> start of the task's first re-run attempt, for tasks that were re-run."""
    return {
        f"{dag.dag_id}/{task.task_id}": start
        for task in dag.tasks
        if len(task.attempts) >= 2 and (start := task.attempts[1].start) is not None
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


@dataclass
class WorkReport:
    """The measured work of each side ("plain" / "crashsafe") and how well the meter could see."""

    sides: dict[str, DagWork]
    coverage: Coverage

    @classmethod
    def build(
        cls,
        result: MeterResult,
        dag_ids: Mapping[str, str],
        reruns: Mapping[str, float] | None = None,
    ) -> WorkReport:
        """Summarise a meter's result for the sides in ``dag_ids`` (side -> dag_id).

        ``reruns`` (label -> epoch start of its re-run, see :func:`rerun_starts`) enables the
        adopted seconds; labels of other DAGs are ignored.
        """
        by_dag = summarize(result.labels, reruns)
        return cls(
            sides={side: by_dag.get(dag_id, DagWork(dag_id)) for side, dag_id in dag_ids.items()},
            coverage=result.coverage,
        )

    def to_facts(self) -> dict[str, Any]:
        """A JSON-ready dict: per side its totals and per task every execution's seconds."""
        sides = {}
        for side, dag in self.sides.items():
            sides[side] = {
                "dag_id": dag.dag_id,
                "executions": dag.executions,
                "needed": round(dag.needed, 3),
                "redone": round(dag.redone, 3),
                "redone_pct": None if dag.redone_pct is None else round(dag.redone_pct, 2),
                "adopted": round(dag.adopted, 3),
                "tasks": [
                    {
                        "task_id": t.task_id,
                        "executions": t.executions,
                        "seconds": [round(s, 3) for s in t.seconds],
                        "needed": round(t.needed, 3),
                        "redone": round(t.redone, 3),
                        "adopted": round(t.adopted, 3),
                    }
                    for t in dag.tasks
                ],
            }
        return {**asdict(self.coverage), "sides": sides}

    @classmethod
    def from_facts(cls, raw: Mapping[str, Any]) -> WorkReport:
        """The report :meth:`to_facts` wrote (derived totals are recomputed, not trusted)."""
        sides = {
            side: DagWork(
                d["dag_id"],
                [TaskWork(t["task_id"], list(t["seconds"]), t.get("adopted", 0.0)) for t in d["tasks"]],
            )
            for side, d in raw["sides"].items()
        }
        coverage = Coverage(**{f.name: raw[f.name] for f in fields(Coverage) if f.name in raw})
        return cls(sides=sides, coverage=coverage)

    def lines(self) -> list[str]:
        """The report section: totals side by side, then each DAG's tasks that ran more than once."""
        seen = self.coverage
        lines = [
            f"Warehouse work of the long jobs, measured in PostgreSQL (pg_stat_activity every "
            f"{seen.interval:g} s, {seen.samples} samples):"
        ]
        shown = [(SIDE_TITLES.get(side, side), dag) for side, dag in self.sides.items()]
        totals: list[tuple[str, ...]] = [("", *(title for title, _ in shown))]
        totals += [
            ("executions", *(f"{d.executions} for {len(d.tasks)} tasks" for _, d in shown)),
            ("needed s", *(f"{d.needed:.0f}" for _, d in shown)),
            ("redone s", *(f"{d.redone:.0f}" for _, d in shown)),
            ("redone % of needed", *(_pct(d.redone_pct) for _, d in shown)),
            ("taken over s", *(f"{d.adopted:.0f}" for _, d in shown)),
        ]
        lines += align(totals, "  ")
        lines += [
            "  (needed: each task's longest execution; redone: its other executions;",
            "   taken over: work in flight when its re-run started, which the re-run did not redo —",
            "   it adopted the commit, or found it already made)",
        ]
        for _, dag in shown:
            lines += self._task_lines(dag)
        if seen.failed_samples:
            lines.append(
                f"  WARNING: {seen.failed_samples} samples failed (last: {seen.last_error}); "
                "executions during them may be short or missing"
            )
        if seen.hidden:
            lines.append(
                f"  WARNING: {seen.hidden} sightings of labelled backends were hidden from the meter's role "
                "(grant it pg_read_all_stats)"
            )
        return lines

    @staticmethod
    def _task_lines(dag: DagWork) -> list[str]:
        listed = [t for t in dag.tasks if t.executions > 1 or t.adopted > 0]
        adopted = sum(t.adopted > 0 for t in dag.tasks)
        head = f"  {dag.dag_id}: {sum(t.executions > 1 for t in dag.tasks)} of {len(dag.tasks)} tasks"
        head += " executed more than once" + (f", {adopted} took over in-flight work" if adopted else "")
        if not listed:
            return [head]
        table: list[tuple[str, ...]] = [
            ("task", "runs", "seconds of each run", "needed", "redone", "taken over")
        ]
        table += [
            (
                t.task_id,
                str(t.executions),
                ", ".join(f"{s:.1f}" for s in t.seconds),
                f"{t.needed:.1f}",
                f"{t.redone:.1f}",
                f"{t.adopted:.1f}" if t.adopted else "-",
            )
            for t in listed
        ]
        return [head, *align(table, "    ")]


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """Summarise what the meter saw, with each re-run's start from the tasks (writes first)."""
    if session.work is None:
        return
    reruns = {
        k: v for d in (facts.plain, facts.crashsafe) if d is not None for k, v in rerun_starts(d).items()
    }
    facts.work = WorkReport.build(session.work, dag_ids(session.keys), reruns).to_facts()


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    return {}


def section(facts: DrillFacts) -> list[str]:
    return WorkReport.from_facts(facts.work).lines() if facts.work else []


def invariants(facts: DrillFacts) -> list[str]:
    return []


def held(facts: DrillFacts) -> list[str]:
    return []
