"""What happened, read back after the runs: attempts from Airflow, rows and fences from the warehouse.

Facts are plain dataclasses that round-trip through JSON (``--facts-json``), so the report logic is
tested on recorded facts without booting anything.

Attempts come from the REST API (``/tries``: ``task_instance_history`` plus the current try). A
reset attempt's history ``end_date`` is when it was archived, not when its process stopped — the
old worker keeps running until its heartbeat is refused — so the real end of each attempt is taken
from its task log's last write.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_crashsafe.drill.extra_facts import (
    AlertFact,
    AuditFact,
    PaymentFact,
    audit_from_json,
    payments_from_json,
)

__all__ = [
    "AttemptFact",
    "DagFacts",
    "DrillFacts",
    "FenceFact",
    "TaskFact",
    "WarehouseFacts",
    "attempts_from_tries",
    "parse_time",
]


@dataclass
class AttemptFact:
    """One executed attempt; times are epoch seconds."""

    try_number: int
    state: str | None
    start: float | None
    end: float | None
    log_end: float | None = None
    #: What the attempt's log says about how it ended: "fenced_out", "cancelled" (on_kill),
    #: "adopted" (it took over its predecessor's committed unit), "outcome_unknown" (a ledgered
    #: call stopped for a person) or None.
    outcome: str | None = None

    @property
    def real_end(self) -> float | None:
        """When the attempt's process last did something (its log), else Airflow's end date."""
        ends = [t for t in (self.log_end, self.end) if t is not None]
        return max(ends) if ends else None


@dataclass
class TaskFact:
    task_id: str
    final_state: str | None
    attempts: list[AttemptFact]


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


@dataclass
class DrillFacts:
    """Everything the report needs; ``plain`` is the control, ``crashsafe`` is under test."""

    plain: DagFacts | None
    crashsafe: DagFacts | None
    crashed_at: float | None
    restarted_at: float | None
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Session ids of every process group the drill started (tests check none survives).
    sessions: list[int] = field(default_factory=list)
    #: Side ("plain" / "crashsafe") -> its payments; side -> the audit's duplicate slots.
    payments: dict[str, list[PaymentFact]] = field(default_factory=dict)
    audit: dict[str, list[AuditFact]] = field(default_factory=dict)
    alert: AlertFact | None = None
    #: The work meter's server-side account (:class:`~airflow_crashsafe.drill.report_work.WorkReport`).
    work: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> DrillFacts:
        raw = json.loads(text)
        for side in ("plain", "crashsafe"):
            if raw.get(side) is not None:
                raw[side] = _dag_facts(raw[side])
        raw["payments"] = payments_from_json(raw.get("payments") or {})
        raw["audit"] = audit_from_json(raw.get("audit") or {})
        if raw.get("alert") is not None:
            raw["alert"] = AlertFact(**raw["alert"])
        return cls(**raw)


def _dag_facts(raw: dict[str, Any]) -> DagFacts:
    raw = dict(raw)
    raw["tasks"] = [
        TaskFact(t["task_id"], t["final_state"], [AttemptFact(**a) for a in t["attempts"]])
        for t in raw["tasks"]
    ]
    raw["warehouse"] = WarehouseFacts(**raw["warehouse"])
    if raw.get("fences") is not None:
        raw["fences"] = [FenceFact(**f) for f in raw["fences"]]
    return DagFacts(**raw)


def parse_time(value: str | None) -> float | None:
    """Epoch seconds of an API timestamp (``2026-11-30T02:07:00.424654Z``)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _outcome(log_text: str) -> str | None:
    """How a stale attempt was stopped, from its task log (crashsafe's own log lines)."""
    if "OutcomeUnknown" in log_text:
        return "outcome_unknown"
    if "FencedOut" in log_text:
        return "fenced_out"
    if "adopted the work of" in log_text:
        return "adopted"
    if "crashsafe: on_kill: cancelling" in log_text:
        return "cancelled"
    return None


def attempts_from_tries(tries: list[dict[str, Any]], logs_dir: Path | None = None) -> list[AttemptFact]:
    """Attempts that actually started, oldest first, with the end of each one's task log."""
    attempts = []
    for entry in sorted(tries, key=lambda t: t["try_number"]):
        if entry.get("start_date") is None:
            continue
        log_end, outcome = None, None
        if logs_dir is not None:
            task_dir = f"dag_id={entry['dag_id']}/run_id=*/task_id={entry['task_id']}"
            pattern = f"{task_dir}/attempt={entry['try_number']}.log"
            logs = list(logs_dir.glob(pattern))
            log_end = max((p.stat().st_mtime for p in logs), default=None)
            outcome = _outcome("".join(p.read_text(errors="replace") for p in logs))
        attempts.append(
            AttemptFact(
                try_number=int(entry["try_number"]),
                state=entry.get("state"),
                start=parse_time(entry.get("start_date")),
                end=parse_time(entry.get("end_date")),
                log_end=log_end,
                outcome=outcome,
            )
        )
    return attempts


def read_warehouse(url: str, schema: str, day: str) -> WarehouseFacts:
    """Revenue and row counts of one DAG's tables for ``day`` (PostgreSQL)."""
    import psycopg
    from psycopg import sql

    def one(query: str) -> Any:
        statement = sql.SQL(query).format(s=sql.Identifier(schema))
        row = conn.execute(statement, {"day": day}).fetchone()
        return row[0] if row else None

    total = "SELECT coalesce(sum(amount), 0) FROM {s}.{t} WHERE day = %(day)s"
    keys = "SELECT count(*) FROM (SELECT DISTINCT day, region, order_id FROM {s}.{t} WHERE day = %(day)s) k"
    with psycopg.connect(url, autocommit=True) as conn:
        reported = conn.execute(
            sql.SQL("SELECT revenue FROM {s}.daily_revenue WHERE day = %(day)s").format(
                s=sql.Identifier(schema)
            ),
            {"day": day},
        ).fetchall()
        return WarehouseFacts(
            revenue_expected=float(one(total.replace("{t}", "orders"))),
            revenue_actual=float(one(total.replace("{t}", "fact_revenue"))),
            revenue_reported=[float(r[0]) for r in reported],
            orders=int(one("SELECT count(*) FROM {s}.orders WHERE day = %(day)s")),
            fact_rows=int(one("SELECT count(*) FROM {s}.fact_revenue WHERE day = %(day)s")),
            fact_keys=int(one(keys.replace("{t}", "fact_revenue"))),
            line_rows=int(one("SELECT count(*) FROM {s}.order_lines WHERE day = %(day)s")),
            line_keys=int(one(keys.replace("{t}", "order_lines"))),
        )


def read_fences(url: str, dag_id: str, day: str) -> list[FenceFact]:
    """The crashsafe fence rows of ``dag_id`` for ``day``'s slots (empty if none were written)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('crashsafe_fences')").fetchone()
        if not exists or exists[0] is None:
            return []
        rows = conn.execute(
            "SELECT task_id, target, issued_try, committed_try, rejected_count FROM crashsafe_fences"
            " WHERE dag_id = %(dag_id)s AND slot_partition LIKE %(day)s ORDER BY task_id, target",
            {"dag_id": dag_id, "day": f"{day}%"},
        ).fetchall()
    return [FenceFact(r[0], r[1], int(r[2]), None if r[3] is None else int(r[3]), int(r[4])) for r in rows]


def collect_dag_facts(
    api: Any,
    *,
    dag_id: str,
    run_id: str,
    logs_dir: Path,
    warehouse_url: str,
    schema: str,
    day: str,
    long_task_prefixes: list[str],
    fenced: bool,
) -> DagFacts:
    """All facts of one DAG run (``api`` is a :class:`~airflow_crashsafe.drill.scenario.Api`)."""
    tasks = []
    run = api.get(f"/dags/{dag_id}/dagRuns/{run_id}")
    for ti in api.task_instances(dag_id, run_id):
        tries = api.tries(dag_id, run_id, ti["task_id"])
        tasks.append(TaskFact(ti["task_id"], ti["state"], attempts_from_tries(tries, logs_dir)))
    return DagFacts(
        dag_id=dag_id,
        run_state=str(run["state"]),
        tasks=sorted(tasks, key=lambda t: t.task_id),
        warehouse=read_warehouse(warehouse_url, schema, day),
        fences=read_fences(warehouse_url, dag_id, day) if fenced else None,
        long_task_prefixes=long_task_prefixes,
        run_end=parse_time(run.get("end_date")),
    )
