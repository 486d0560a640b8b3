"""The storm scenario's facts and report (``--scenario storm``): the restart's burst against a deadline.

Pure functions of :class:`StormFacts`, recorded by :mod:`drill.storm`, so the report is tested on
recorded facts without booting anything. One table per variant, plain and crashsafe side by side:
the chain the plain side should show (peak concurrent loads above the capacity C, statement
timeouts, Airflow retries, warehouse work redone, the finish against the deadline) and the
watchdog's early and missed-deadline pages. Times are also given on the night's scaled clock:
the first source lands at 00:00 and the deadline is 06:00.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drill.table import align

__all__ = ["VARIANT_TITLES", "StormDag", "StormFacts", "inconclusive", "invariants", "render"]

VARIANT_TITLES = {
    "adopt": "adopt: the crash leaves the in-flight loads running (workers and their statements survive)",
    "lost": "lost: the in-flight work dies with the crash (workers killed, backends terminated)",
}
SIDE_TITLES = {"plain": "plain operators", "crashsafe": "crashsafe"}
#: Minutes on the scaled clock from the night's start (00:00) to the deadline (06:00).
NIGHT_MINUTES = 360.0


@dataclass
class StormDag:
    """One DAG of the storm: one side of one variant, and what happened to it."""

    dag_id: str
    side: str
    variant: str
    run_state: str = "?"
    finished_at: float | None = None
    peak: int = 0
    above_seconds: float = 0.0
    timeouts: int = 0
    retries: int = 0
    #: Loads with more than one try (reset by the restarted scheduler, or retried).
    loads_rerun: int = 0
    executions: int = 0
    needed: float = 0.0
    redone: float = 0.0
    early_page_at: float | None = None
    missed_page_at: float | None = None

    def met(self, deadline: float) -> bool:
        return self.run_state == "success" and self.finished_at is not None and self.finished_at <= deadline


@dataclass
class StormFacts:
    """The storm's set-up and, per DAG, its outcome (epoch seconds throughout)."""

    loads: int
    capacity: int
    budget: int
    steps: int
    step_seconds: float
    interval: float
    statement_timeout: float
    retries_allowed: int
    retry_delay: float
    night_start: float = 0.0
    deadline_at: float = 0.0
    crashed_at: float | None = None
    restarted_at: float | None = None
    dags: list[StormDag] = field(default_factory=list)
    #: Variant -> what the crash destroyed on purpose: {"processes": n, "backends": n}.
    lost: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> StormFacts:
        raw = dict(raw)
        raw["dags"] = [StormDag(**d) for d in raw.get("dags", [])]
        return cls(**raw)

    def variants(self) -> list[str]:
        return list(dict.fromkeys(d.variant for d in self.dags))

    def dag(self, side: str, variant: str) -> StormDag | None:
        return next((d for d in self.dags if d.side == side and d.variant == variant), None)

    def clock(self, at: float) -> str:
        """``at`` on the scaled clock (00:00 the first source, 06:00 the deadline)."""
        span = self.deadline_at - self.night_start
        minutes = round((at - self.night_start) / span * NIGHT_MINUTES) if span > 0 else 0
        sign = "-" if minutes < 0 else ""
        return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"

    def scaled_minutes(self, seconds: float) -> float:
        span = self.deadline_at - self.night_start
        return seconds / span * NIGHT_MINUTES if span > 0 else 0.0


def _finish(facts: StormFacts, dag: StormDag) -> str:
    if dag.finished_at is None:
        return f"not finished ({dag.run_state})"
    late = dag.finished_at - facts.deadline_at
    word = "after" if late > 0 else "before"
    minutes = abs(facts.scaled_minutes(late))
    return f"{facts.clock(dag.finished_at)} {dag.run_state}, {minutes:.0f} min {word} it ({late:+.0f} s)"


def _early(facts: StormFacts, dag: StormDag) -> str:
    if dag.early_page_at is None:
        return "none"
    before = facts.deadline_at - dag.early_page_at
    if before < 0:
        return f"at {facts.clock(dag.early_page_at)}, after the deadline"
    minutes = facts.scaled_minutes(before)
    return f"at {facts.clock(dag.early_page_at)}, {minutes:.0f} min before ({before:.0f} s)"


def _missed(facts: StormFacts, dag: StormDag) -> str:
    if dag.missed_page_at is None:
        return "none"
    return f"fired at {facts.clock(dag.missed_page_at)} ({dag.missed_page_at - facts.deadline_at:+.0f} s)"


def rows(facts: StormFacts, dag: StormDag) -> dict[str, str]:
    """One column of a variant's table, in display order."""
    above = f" (above C for {dag.above_seconds:.0f} s)" if dag.above_seconds else ""
    return {
        "DAG run": dag.run_state,
        f"peak concurrent loads (C = {facts.capacity})": f"{dag.peak}{above}",
        "statement timeouts": str(dag.timeouts),
        "Airflow retries": str(dag.retries),
        "loads run more than once": f"{dag.loads_rerun}/{facts.loads}",
        "warehouse executions": str(dag.executions),
        "warehouse work needed / redone": f"{dag.needed:.0f} s / {dag.redone:.0f} s",
        "finished (deadline 06:00)": _finish(facts, dag),
        "deadline": "met" if dag.met(facts.deadline_at) else "MISSED",
        "watchdog early page": _early(facts, dag),
        "watchdog missed-deadline page": _missed(facts, dag),
    }


def _variant_table(facts: StormFacts, variant: str) -> list[str]:
    columns = [
        (SIDE_TITLES[side], rows(facts, dag))
        for side in SIDE_TITLES
        if (dag := facts.dag(side, variant)) is not None
    ]
    if not columns:
        return []
    names = list(dict.fromkeys(n for _, r in columns for n in r))
    table: list[tuple[str, ...]] = [("", *(title for title, _ in columns))]
    table += [(name, *(r.get(name, "") for _, r in columns)) for name in names]
    lost = facts.lost.get(variant)
    head = [f"Variant {VARIANT_TITLES.get(variant, variant)}"]
    if lost:
        head.append(
            f"  the crash also killed {lost.get('processes', 0)} worker processes and terminated "
            f"{lost.get('backends', 0)} warehouse backends of this variant's loads"
        )
    return [*head, *align(table, "  "), ""]


def render(facts: StormFacts) -> str:
    """The whole storm report: the set-up, one table per variant, the verdict."""
    f = facts
    work = f.steps * f.step_seconds
    lines = [
        "Storm drill: the restart's burst against a finite warehouse and a deadline",
        f"  {f.loads} loads per DAG, one source landing every {f.interval:g} s; each load is {f.steps} "
        f"steps of {f.step_seconds:g} s ({work:g} s alone), slowed by active/C above C = {f.capacity}",
        f"  statement_timeout {f.statement_timeout:g} s; retries {f.retries_allowed}, "
        f"{f.retry_delay:g} s apart; crashsafe recovery budget {f.budget} per warehouse",
        f"  scaled clock: 00:00 = first source, 06:00 = deadline ({f.deadline_at - f.night_start:.0f} s "
        "later; 1 min = {:.2f} s)".format((f.deadline_at - f.night_start) / NIGHT_MINUTES),
    ]
    if f.crashed_at is not None and f.restarted_at is not None:
        lines.append(
            f"  scheduler SIGKILLed at {f.clock(f.crashed_at)}, restarted at {f.clock(f.restarted_at)} "
            f"({f.restarted_at - f.crashed_at:.0f} s later)"
        )
    lines.append("")
    for variant in f.variants():
        lines += _variant_table(f, variant)
    lines += [f"NOTE: {n}" for n in f.notes]
    broken, unproved = invariants(f), inconclusive(f)
    if broken:
        lines += ["VERDICT: crashsafe missed its deadline:", *(f"  - {b}" for b in broken)]
    elif unproved:
        lines += ["VERDICT: inconclusive:", *(f"  - {u}" for u in unproved)]
    else:
        lines.append("VERDICT: plain operators missed the deadline; crashsafe met it in every variant")
    return "\n".join(lines)


def invariants(facts: StormFacts) -> list[str]:
    """Crashsafe's promise: every crashsafe DAG finished successfully by the deadline."""
    return [
        f"{d.dag_id}: {_finish(facts, d)}"
        for d in facts.dags
        if d.side == "crashsafe" and not d.met(facts.deadline_at)
    ]


def inconclusive(facts: StormFacts) -> list[str]:
    """Reasons the storm proved nothing: no crash, or a plain side that met the deadline anyway."""
    reasons = []
    if facts.crashed_at is None:
        reasons.append("the scheduler was never killed")
    for d in facts.dags:
        if d.side == "plain" and d.met(facts.deadline_at):
            reasons.append(f"{d.dag_id} met the deadline: the storm was not reproduced")
        if d.loads_rerun == 0:
            reasons.append(f"{d.dag_id}: no load ran twice; the crash interrupted nothing")
    return reasons
