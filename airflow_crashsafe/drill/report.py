"""Pure functions from drill facts to the side-by-side report and the list of broken invariants.

The plain DAG's damage is expected and only reported; a broken invariant of the crashsafe DAG
makes the drill exit non-zero. Nothing here touches a process or a database.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_crashsafe.drill.facts import DagFacts, DrillFacts, TaskFact
from airflow_crashsafe.drill.report_parts import (
    STOPPED_FOR_PERSON,
    alert_lines,
    audit_lines,
    payment_invariants,
    payment_rows,
    stopped_for_person,
)
from airflow_crashsafe.drill.report_work import WorkReport

__all__ = [
    "all_broken",
    "broken_invariants",
    "inconclusive",
    "metrics",
    "overlaps",
    "render",
]

EPSILON = 0.005  # money is numeric(12, 2)


def overlaps(task: TaskFact) -> list[float]:
    """Seconds each superseded attempt was still alive after its successor started (> 0 only)."""
    found = []
    for old, new in zip(task.attempts, task.attempts[1:], strict=False):
        if old.real_end is not None and new.start is not None and old.real_end > new.start:
            found.append(old.real_end - new.start)
    return found


def _money(value: float) -> str:
    return f"{value:,.2f}"


def _revenue(dag: DagFacts) -> str:
    wh = dag.warehouse
    if abs(wh.revenue_actual - wh.revenue_expected) < EPSILON:
        return f"{_money(wh.revenue_actual)} (exact)"
    delta = (
        (wh.revenue_actual - wh.revenue_expected) / wh.revenue_expected * 100 if wh.revenue_expected else 0
    )
    return f"{_money(wh.revenue_actual)} ({delta:+.1f} %)"


def _rows(rows: int, keys: int, orders: int) -> str:
    text = f"{rows} for {orders} orders"
    if rows > keys:
        text += f" ({rows - keys} twice)"
    if keys < orders:
        text += f" ({orders - keys} missing)"
    return text


def _last_try(task: TaskFact | None) -> int | None:
    return max((a.try_number for a in task.attempts), default=None) if task else None


def metrics(dag: DagFacts, restarted_at: float | None = None) -> dict[str, str]:
    """The report's rows for one DAG, in display order."""
    long = dag.long_tasks()
    reset = [t for t in long if len(t.attempts) >= 2]
    ov = [o for t in dag.tasks for o in overlaps(t)]
    wh = dag.warehouse
    rows = {
        "DAG run": dag.run_state,
        "tasks ended success": f"{sum(t.final_state == 'success' for t in dag.tasks)}/{len(dag.tasks)}",
        f"tasks {STOPPED_FOR_PERSON}": str(sum(stopped_for_person(t) for t in dag.tasks)),
        "loads run more than once": f"{len(reset)}/{len(long)}",
        "attempts (all tasks)": str(sum(len(t.attempts) for t in dag.tasks)),
        "overlapping attempts": f"{len(ov)} (max {max(ov):.1f} s)" if ov else "0",
        "revenue expected": _money(wh.revenue_expected),
        "revenue in fact table": _revenue(dag),
        "revenue reported (revenue_total)": ", ".join(_money(r) for r in wh.revenue_reported) or "none",
        "fact rows": _rows(wh.fact_rows, wh.fact_keys, wh.orders),
        "order-line rows": _rows(wh.line_rows, wh.line_keys, wh.orders),
    }
    if dag.fences is None:
        rows["stale writes rejected"] = "n/a (no fencing)"
        rows["stale attempts cancelled (on_kill)"] = "n/a (no on_kill)"
        rows["committed by newest attempt"] = "n/a (not recorded)"
    else:
        by_task = {t.task_id: t for t in dag.tasks}
        newest = sum(f.committed_try is not None and f.committed_try == f.issued_try for f in dag.fences)
        rows["stale writes rejected"] = str(sum(f.rejected_count for f in dag.fences))
        cancelled = sum(a.outcome == "cancelled" for t in dag.tasks for a in t.attempts[:-1])
        rows["stale attempts cancelled (on_kill)"] = str(cancelled)
        rows["committed by newest attempt"] = f"{newest}/{len(dag.fences)} fenced writes"
        adopting = {t.task_id for t in dag.tasks if any(a.outcome == "adopted" for a in t.attempts)}
        # A re-run that waited for the predecessor's unit and adopted it is counted as such, not
        # as one that merely found the work already committed.
        skipped = sum(
            f.committed_try is not None
            and f.committed_try < (_last_try(by_task.get(f.task_id)) or 0)
            and f.task_id not in adopting
            for f in dag.fences
        )
        if skipped:
            rows["re-runs that found the work committed"] = str(skipped)
        rows["re-runs that adopted in-flight work"] = str(len(adopting))
    if restarted_at is not None and dag.run_end is not None:
        rows["run ended, after the restart"] = f"{dag.run_end - restarted_at:.0f} s"
    return rows


def broken_invariants(dag: DagFacts) -> list[str]:
    """The crashsafe DAG's promises that did not hold (empty when all hold)."""
    broken = []
    wh = dag.warehouse
    stopped = [t for t in dag.tasks if stopped_for_person(t)]
    # A run failed only by calls stopped for a person is the documented outcome, not a break.
    if dag.run_state != "success" and not (dag.run_state == "failed" and stopped):
        broken.append(f"DAG run ended {dag.run_state}, not success")
    not_ok = [
        f"{t.task_id}={t.final_state}" for t in dag.tasks if t.final_state != "success" and t not in stopped
    ]
    if not_ok:
        broken.append("tasks did not end success: " + ", ".join(not_ok))
    if abs(wh.revenue_actual - wh.revenue_expected) >= EPSILON:
        broken.append(f"revenue {_money(wh.revenue_actual)} != expected {_money(wh.revenue_expected)}")
    if len(wh.revenue_reported) != 1 or abs(wh.revenue_reported[0] - wh.revenue_expected) >= EPSILON:
        broken.append(f"reported revenue {wh.revenue_reported} != [{_money(wh.revenue_expected)}]")
    for name, rows, keys in (
        ("fact", wh.fact_rows, wh.fact_keys),
        ("order-line", wh.line_rows, wh.line_keys),
    ):
        if rows != keys:
            broken.append(f"{rows - keys} {name} rows counted twice")
        if keys != wh.orders:
            broken.append(f"{name} rows cover {keys} of {wh.orders} orders")
    if dag.fences is not None:
        fenced = {f.task_id for f in dag.fences}
        missing = [t.task_id for t in dag.long_tasks() if t.task_id not in fenced]
        if missing:
            broken.append("no fenced commit recorded for " + ", ".join(missing))
        for f in dag.fences:
            if f.committed_try is None:
                broken.append(f"{f.task_id} ({f.target}) never committed")
            elif f.committed_try != f.issued_try:
                broken.append(
                    f"stale overwrite: {f.task_id} ({f.target}) committed by try {f.committed_try} "
                    f"after try {f.issued_try} was issued the slot"
                )
    return broken


def all_broken(facts: DrillFacts) -> list[str]:
    """Every broken crashsafe invariant: the DAG's own and the payments'."""
    if facts.crashsafe is None:
        return []
    return broken_invariants(facts.crashsafe) + payment_invariants(facts.payments.get("crashsafe", []))


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


def render(facts: DrillFacts) -> str:
    """The side-by-side text report."""
    sides = [("plain operators", "plain", facts.plain), ("crashsafe", "crashsafe", facts.crashsafe)]
    columns = [
        (title, {**metrics(dag, facts.restarted_at), **payment_rows(facts.payments.get(side, []), dag)})
        for title, side, dag in sides
        if dag is not None
    ]
    down = (
        f"{facts.restarted_at - facts.crashed_at:.0f} s"
        if facts.crashed_at is not None and facts.restarted_at is not None
        else "?"
    )
    lines = [
        f"Crash drill: scheduler SIGKILLed at {_when(facts.crashed_at)}, down {down}, then restarted",
        "",
    ]
    names = list(dict.fromkeys(name for _, rows in columns for name in rows))
    width = max(len(n) for n in names) + 2
    col = max([24, *(len(v) + 2 for _, rows in columns for v in rows.values())])
    lines.append(" " * width + "".join(title.ljust(col) for title, _ in columns).rstrip())
    for name in names:
        values = "".join(rows.get(name, "").ljust(col) for _, rows in columns)
        lines.append((name.ljust(width) + values).rstrip())
    lines.append("")
    if facts.audit:
        lines.append("Audit (airflow-crashsafe audit reconcile, then duplicates), per re-run slot:")
        for _title, side, dag in sides:
            if dag is not None and side in facts.audit:
                lines += audit_lines(dag.dag_id, facts.audit[side])
        lines.append("")
    if facts.work:
        lines += WorkReport.from_facts(facts.work).lines()
        lines.append("")
    lines += alert_lines(facts.alert)
    if facts.alert is not None:
        lines.append("")
    if facts.crashsafe is not None:
        broken = all_broken(facts)
        stopped = [t.task_id for t in facts.crashsafe.tasks if stopped_for_person(t)]
        if broken:
            lines.append("CRASHSAFE INVARIANTS BROKEN:")
            lines += [f"  - {b}" for b in broken]
        else:
            lines.append(
                "Crashsafe invariants hold: revenue exact, no row counted twice, no stale overwrite,"
            )
            if facts.payments.get("crashsafe"):
                lines.append("no payment booked twice,")
            lines.append(
                "every task ended success"
                + (f" except {len(stopped)} {STOPPED_FOR_PERSON}." if stopped else ".")
            )
        if stopped:
            lines.append(
                f"The crashsafe run ends {facts.crashsafe.run_state} on purpose: "
                + ", ".join(stopped)
                + " pushed to a vendor that ignores idempotency keys and the reset attempt cannot know "
                "whether the first attempt's payment went through; it refuses to pay again "
                "(OutcomeUnknown). Check with the vendor, then `airflow-crashsafe ledger resolve`."
            )
    lines += [f"Note: {n}" for n in (*inconclusive(facts), *facts.notes)]
    if facts.wall_seconds:
        lines.append(f"Drill wall time: {facts.wall_seconds:.0f} s")
    return "\n".join(lines)
