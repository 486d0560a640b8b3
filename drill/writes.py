"""Capability: warehouse writes. The nightly load's revenue and rows, and who committed each slot.

Read back after the runs: every task's attempts from Airflow (:mod:`drill.attempts`), the
revenue and row counts of the DAG's tables, and for the crashsafe DAG its fence rows — who was
issued each slot last, who committed, how many stale writes were refused. The plain DAG's damage
(doubled revenue, rows counted twice) is only reported; the crashsafe DAG must be exact, commit
every fenced slot by the try that holds it and end every task success (see docs/design.md,
"Fencing token" and "Committed means done").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from drill.attempts import (
    STOPPED_FOR_PERSON,
    AttemptFact,
    TaskFact,
    attempts_from_tries,
    overlaps,
    parse_time,
    stopped_for_person,
)
from drill.dags import DAGS, LONG_TASK_PREFIXES

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession

__all__ = [
    "DagFacts",
    "FenceFact",
    "WarehouseFacts",
    "broken_invariants",
    "collect",
    "held",
    "invariants",
    "metrics",
    "rows",
    "section",
]

EPSILON = 0.005  # money is numeric(12, 2)

#: What the drill cannot show with its warehouse on MariaDB (``--warehouse mariadb``), in the report.
MARIADB_NOTES = [
    "warehouse on MariaDB: the writes are fenced, without adoption. A MariaDB transaction does not "
    "outlive its client (there is no autocommitted server-side unit like PostgreSQL's DO block), so a "
    "reset re-run redoes its load instead of taking its predecessor's over; the operators log this "
    "at start (docs/databases.md)",
    "work meter: not run on MariaDB. It samples PostgreSQL's pg_stat_activity; MariaDB's "
    "PROCESSLIST shows a stored function's inner statement (DO SLEEP), not the load that called it, "
    "so the seconds each load ran are not measured",
]
WAREHOUSE_TITLES = {"postgres": "PostgreSQL", "mariadb": "MariaDB"}
NO_ADOPTION = "n/a (MariaDB: no unit outlives its client)"


@dataclass
class FenceFact:
    """One row of ``crashsafe_fences``: who was issued the slot last, who committed, who was refused."""

    task_id: str
    target: str
    issued_try: int
    committed_try: int | None
    rejected_count: int


@dataclass
class WarehouseFacts:
    revenue_expected: float
    revenue_actual: float
    revenue_reported: list[float]
    orders: int
    fact_rows: int
    fact_keys: int
    line_rows: int
    line_keys: int


@dataclass
class DagFacts:
    dag_id: str
    run_state: str
    tasks: list[TaskFact]
    warehouse: WarehouseFacts
    fences: list[FenceFact] | None = None
    long_task_prefixes: list[str] = field(default_factory=list)
    #: When the DAG run ended (epoch seconds; None while it runs).
    run_end: float | None = None

    def long_tasks(self) -> list[TaskFact]:
        return [t for t in self.tasks if t.task_id.startswith(tuple(self.long_task_prefixes))]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DagFacts:
        raw = dict(raw)
        raw["tasks"] = [TaskFact.from_json(t) for t in raw["tasks"]]
        raw["warehouse"] = WarehouseFacts(**raw["warehouse"])
        if raw.get("fences") is not None:
            raw["fences"] = [FenceFact(**f) for f in raw["fences"]]
        return cls(**raw)


def read_warehouse(url: str, schema: str, day: str) -> WarehouseFacts:
    """Revenue and row counts of one DAG's tables for ``day`` (PostgreSQL or MariaDB ``url``)."""
    from airflow_crashsafe.store.dbapi import connect_url

    db = connect_url(url)

    def one(query: str) -> Any:
        row = db.execute(query.replace("{s}", schema), {"day": day}).fetchone()
        return row[0] if row else None

    total = "SELECT coalesce(sum(amount), 0) FROM {s}.{t} WHERE day = %(day)s"
    keys = "SELECT count(*) FROM (SELECT DISTINCT day, region, order_id FROM {s}.{t} WHERE day = %(day)s) k"
    try:
        reported = db.execute(f"SELECT revenue FROM {schema}.daily_revenue WHERE day = %(day)s", {"day": day})
        return WarehouseFacts(
            revenue_reported=[float(r[0]) for r in reported.fetchall()],
            revenue_expected=float(one(total.replace("{t}", "orders"))),
            revenue_actual=float(one(total.replace("{t}", "fact_revenue"))),
            orders=int(one("SELECT count(*) FROM {s}.orders WHERE day = %(day)s")),
            fact_rows=int(one("SELECT count(*) FROM {s}.fact_revenue WHERE day = %(day)s")),
            fact_keys=int(one(keys.replace("{t}", "fact_revenue"))),
            line_rows=int(one("SELECT count(*) FROM {s}.order_lines WHERE day = %(day)s")),
            line_keys=int(one(keys.replace("{t}", "order_lines"))),
        )
    finally:
        db.rollback()
        db.close()


def read_fences(url: str, dag_id: str, day: str) -> list[FenceFact]:
    """The crashsafe fence rows of ``dag_id`` for ``day``'s slots (empty if none were written).

    Read straight from the table the fenced operators wrote in the warehouse (PostgreSQL or
    MariaDB): the drill checks the store's record from outside, as a person with ``psql`` would.
    """
    from airflow_crashsafe.store.dbapi import connect_url

    db = connect_url(url)
    here = "DATABASE()" if db.dialect.is_mysql else "current_schema()"
    try:
        exists = db.execute(
            "SELECT count(*) FROM information_schema.tables"
            f" WHERE table_name = 'crashsafe_fences' AND table_schema = {here}"
        ).fetchone()
        if not exists or not exists[0]:
            return []
        found = db.execute(
            "SELECT task_id, target, issued_try, committed_try, rejected_count FROM crashsafe_fences"
            " WHERE dag_id = %(dag_id)s AND slot_partition LIKE %(day)s ORDER BY task_id, target",
            {"dag_id": dag_id, "day": f"{day}%"},
        ).fetchall()
    finally:
        db.rollback()
        db.close()
    return [FenceFact(r[0], r[1], int(r[2]), None if r[3] is None else int(r[3]), int(r[4])) for r in found]


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """Each side's DAG run: its tasks' attempts from Airflow, its tables, its fences."""
    scenario = session.ran()
    day = scenario.logical_date[:10]
    for side in session.keys:
        dag_id, schema = DAGS[side]
        run_id = scenario.run_ids[dag_id]
        run = scenario.api.get(f"/dags/{dag_id}/dagRuns/{run_id}")
        tasks = [
            TaskFact(ti["task_id"], ti["state"], _attempts(session, dag_id, run_id, ti["task_id"]))
            for ti in scenario.api.task_instances(dag_id, run_id)
        ]
        dag = DagFacts(
            dag_id=dag_id,
            run_state=str(run["state"]),
            tasks=sorted(tasks, key=lambda t: t.task_id),
            warehouse=read_warehouse(session.warehouse_url, schema, day),
            fences=read_fences(session.warehouse_url, dag_id, day) if side == "crashsafe" else None,
            long_task_prefixes=list(LONG_TASK_PREFIXES),
            run_end=parse_time(run.get("end_date")),
        )
        if side == "crashsafe":
            facts.crashsafe = dag
        else:
            facts.plain = dag


def _attempts(session: DrillSession, dag_id: str, run_id: str, task_id: str) -> list[AttemptFact]:
    tries = session.ran().api.tries(dag_id, run_id, task_id)
    return attempts_from_tries(tries, session.home.task_logs)


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


def _rows(count: int, keys: int, orders: int) -> str:
    text = f"{count} for {orders} orders"
    if count > keys:
        text += f" ({count - keys} twice)"
    if keys < orders:
        text += f" ({orders - keys} missing)"
    return text


def _last_try(task: TaskFact | None) -> int | None:
    return max((a.try_number for a in task.attempts), default=None) if task else None


def _fence_rows(dag: DagFacts, fences: list[FenceFact], adoption: bool) -> dict[str, str]:
    by_task = {t.task_id: t for t in dag.tasks}
    newest = sum(f.committed_try is not None and f.committed_try == f.issued_try for f in fences)
    cancelled = sum(a.outcome == "cancelled" for t in dag.tasks for a in t.attempts[:-1])
    found = {
        "stale writes rejected": str(sum(f.rejected_count for f in fences)),
        "stale attempts cancelled (on_kill)": str(cancelled),
        "committed by newest attempt": f"{newest}/{len(fences)} fenced writes",
    }
    adopting = {t.task_id for t in dag.tasks if any(a.outcome == "adopted" for a in t.attempts)}
    # A re-run that waited for the predecessor's unit and adopted it is counted as such, not
    # as one that merely found the work already committed.
    skipped = sum(
        f.committed_try is not None
        and f.committed_try < (_last_try(by_task.get(f.task_id)) or 0)
        and f.task_id not in adopting
        for f in fences
    )
    if skipped:
        found["re-runs that found the work committed"] = str(skipped)
    found["re-runs that adopted in-flight work"] = str(len(adopting)) if adoption else NO_ADOPTION
    return found


def metrics(dag: DagFacts, restarted_at: float | None = None, *, adoption: bool = True) -> dict[str, str]:
    """The table's rows for one DAG, in display order (``adoption``: the warehouse can adopt)."""
    long = dag.long_tasks()
    reset = [t for t in long if len(t.attempts) >= 2]
    ov = [o for t in dag.tasks for o in overlaps(t)]
    wh = dag.warehouse
    found = {
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
        found["stale writes rejected"] = "n/a (no fencing)"
        found["stale attempts cancelled (on_kill)"] = "n/a (no on_kill)"
        found["committed by newest attempt"] = "n/a (not recorded)"
    else:
        found.update(_fence_rows(dag, dag.fences, adoption))
    if restarted_at is not None and dag.run_end is not None:
        found["run ended, after the restart"] = f"{dag.run_end - restarted_at:.0f} s"
    return found


def _fence_invariants(dag: DagFacts, fences: list[FenceFact]) -> list[str]:
    broken = []
    fenced = {f.task_id for f in fences}
    missing = [t.task_id for t in dag.long_tasks() if t.task_id not in fenced]
    if missing:
        broken.append("no fenced commit recorded for " + ", ".join(missing))
    for f in fences:
        if f.committed_try is None:
            broken.append(f"{f.task_id} ({f.target}) never committed")
        elif f.committed_try != f.issued_try:
            broken.append(
                f"stale overwrite: {f.task_id} ({f.target}) committed by try {f.committed_try} "
                f"after try {f.issued_try} was issued the slot"
            )
    return broken


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
    for name, count, keys in (
        ("fact", wh.fact_rows, wh.fact_keys),
        ("order-line", wh.line_rows, wh.line_keys),
    ):
        if count != keys:
            broken.append(f"{count - keys} {name} rows counted twice")
        if keys != wh.orders:
            broken.append(f"{name} rows cover {keys} of {wh.orders} orders")
    if dag.fences is not None:
        broken += _fence_invariants(dag, dag.fences)
    return broken


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    dag = facts.dag(side)
    return {} if dag is None else metrics(dag, facts.restarted_at, adoption=facts.warehouse == "postgres")


def section(facts: DrillFacts) -> list[str]:
    if facts.warehouse == "postgres":
        return []
    return [
        f"Warehouse on {WAREHOUSE_TITLES.get(facts.warehouse, facts.warehouse)}: the loads' tables and "
        "their fence rows (the crashsafe store stays on PostgreSQL)"
    ]


def invariants(facts: DrillFacts) -> list[str]:
    return [] if facts.crashsafe is None else broken_invariants(facts.crashsafe)


def held(facts: DrillFacts) -> list[str]:
    return ["revenue exact, no row counted twice, no stale overwrite,"]
