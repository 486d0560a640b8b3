"""Capability: the audit. Every slot that ran more than once, as the audit classifies it.

After the runs, the drill does what an operator would: ``airflow-crashsafe audit reconcile``
against the drill's api-server (SimpleAuthManager ``all_admins``: no token) fills in the attempt
ends no hook reported — a reset attempt fires none — then ``airflow-crashsafe duplicates``' own
:func:`~airflow_crashsafe.audit.cli.find_duplicates` classifies the records. The drill only turns
its :class:`~airflow_crashsafe.audit.classify.SlotReport` objects into facts. Per reset pair
(a replaced execution and the try that re-ran it) it also says how long both ran at once, as
measured from the records (the replaced process's last sign of life, not its archive time). The
audit only reports, it promises nothing the drill could break (see docs/design.md, "Audit").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drill.dags import dag_ids
from drill.table import align

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession

__all__ = [
    "AuditFact",
    "ResetPair",
    "audit_facts",
    "audit_from_json",
    "audit_lines",
    "collect",
    "fact_from_report",
    "held",
    "invariants",
    "reset_pairs",
    "reset_summary",
    "rows",
    "section",
]


@dataclass
class AuditFact:
    """The audit's verdict on one slot that executed more than once (``airflow-crashsafe duplicates``)."""

    task_id: str
    executions: int
    #: ``host pid`` of every execution, oldest first (empty strings where unknown).
    processes: list[str]
    overlap_seconds: float
    kinds: list[str]
    protection: str
    risk: str
    end_sources: list[str | None] = field(default_factory=list)

    @property
    def harmful(self) -> bool:
        """An unprotected re-run can double a side effect; a fenced or ledgered one cannot."""
        return self.protection == "unprotected"


def audit_from_json(raw: dict[str, Any]) -> dict[str, list[AuditFact]]:
    return {side: [AuditFact(**a) for a in facts] for side, facts in raw.items()}


@dataclass(frozen=True)
class ResetPair:
    """One reset re-run: the replaced execution, the one that re-ran the slot, their overlap."""

    task_id: str
    #: ``host pid`` of the replaced execution and of its successor.
    replaced: str
    rerun: str
    overlap_seconds: float
    #: "overlapping reset re-run" or "reset re-run".
    classification: str


def _task_label(report: Any) -> str:
    return str(report.task_id) + (f"[{report.map_index}]" if report.map_index >= 0 else "")


def reset_pairs(report: Any) -> list[ResetPair]:
    """The reset re-runs among a :class:`SlotReport`'s re-runs, oldest first."""
    return [
        ResetPair(
            task_id=_task_label(report),
            replaced=f"{r.earlier.hostname} {r.earlier.pid}",
            rerun=f"{r.later.hostname} {r.later.pid}",
            overlap_seconds=round(float(r.overlap_seconds), 1),
            classification="overlapping reset re-run" if "overlap" in r.kinds else "reset re-run",
        )
        for r in report.reruns
        if "reset_rerun" in r.kinds
    ]


def reset_summary(side: str, reports: list[Any]) -> str:
    """One line: how many reset re-runs a side had, how many overlapped and by how much."""
    pairs = [p for r in reports for p in reset_pairs(r)]
    overlaps = sorted(p.overlap_seconds for p in pairs if p.overlap_seconds > 0)
    line = f"{side}: {len(pairs)} reset re-runs, {len(overlaps)} overlapping"
    if overlaps:
        line += f" ({overlaps[0]:.1f}-{overlaps[-1]:.1f} s)"
    return line


def fact_from_report(report: Any) -> AuditFact:
    """One :class:`SlotReport` as an :class:`AuditFact` (task, processes, overlap, verdict)."""
    return AuditFact(
        task_id=_task_label(report),
        executions=len(report.executions),
        processes=[f"{e.hostname} {e.pid}".strip() for e in report.executions],
        overlap_seconds=round(float(report.overlap_seconds), 1),
        kinds=list(report.kinds),
        protection=str(report.protection),
        risk=str(report.risk),
        end_sources=[e.end_source for e in report.executions],
    )


def audit_facts(
    store_url: str,
    api_url: str,
    dag_ids: dict[str, str],
    spool_dir: Path | None = None,
    day: str = "",
) -> tuple[dict[str, list[AuditFact]], str]:
    """Reconcile against ``api_url``, then ``{side: duplicate slots of its DAG}`` and a summary line.

    ``day`` (``YYYY-MM-DD``) keeps only that day's slots: a fleet drill runs one day per scenario.
    ``spool_dir`` (the drill's ``$AIRFLOW_HOME/crashsafe-spool``) is delivered first: a task
    process that exited right after spooling an event left it for the next drainer, and the
    drill's own process is the last one that will run.
    """
    from airflow_crashsafe.audit.cli import find_duplicates
    from airflow_crashsafe.audit.reconcile import AirflowApi, reconcile
    from airflow_crashsafe.audit.spool import deliver
    from airflow_crashsafe.store import open_store

    store = open_store(store_url)
    delivered = deliver(store, spool_dir) if spool_dir is not None else 0
    done = reconcile(store, AirflowApi(api_url, timeout=30.0), grace=timedelta(0))
    summary = (
        f"audit reconcile: {delivered} spooled events delivered, {done.task_instances} task instances, "
        f"{done.ends_filled} ends filled, {done.tries_added} tries added, {len(done.errors)} errors"
    )
    reports = {
        side: [
            r
            for r in find_duplicates(store, since=timedelta(hours=12), dag_id=dag_id)
            if str(r.partition).startswith(day)
        ]
        for side, dag_id in dag_ids.items()
    }
    summary += "; " + "; ".join(reset_summary(side, found) for side, found in reports.items())
    return {side: [fact_from_report(r) for r in found] for side, found in reports.items()}, summary


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """Deliver the spool, reconcile with the api-server, then read each side's duplicate slots."""
    if not session.store_url:
        return
    facts.audit, summary = audit_facts(
        session.store_url,
        session.home.api_url,
        dag_ids(session.keys),
        spool_dir=session.home.airflow_home / "crashsafe-spool",
        day=session.ran().logical_date[:10],
    )
    session.progress(summary)


def audit_lines(dag_id: str, facts: list[AuditFact]) -> list[str]:
    """The audit's per-task table for one DAG: executions, processes, overlap, verdict."""
    lines = [f"  {dag_id}: {len(facts)} slots executed more than once"]
    if not facts:
        return lines
    header = ("task", "runs", "host pid of each run", "overlap", "classification", "protection", "verdict")
    table = [header]
    for f in facts:
        verdict = f"HARMFUL ({f.risk} risk)" if f.harmful else "harmless"
        table.append(
            (
                f.task_id,
                str(f.executions),
                ", ".join(p or "?" for p in f.processes),
                f"{f.overlap_seconds:.1f} s" if f.overlap_seconds else "-",
                "+".join(f.kinds) or "-",
                f.protection,
                verdict,
            )
        )
    return lines + align(table, "    ")


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    return {}


def section(facts: DrillFacts) -> list[str]:
    if not facts.audit:
        return []
    lines = ["Audit (airflow-crashsafe audit reconcile, then duplicates), per re-run slot:"]
    for side in ("plain", "crashsafe"):
        dag = facts.dag(side)
        if dag is not None and side in facts.audit:
            lines += audit_lines(dag.dag_id, facts.audit[side])
    return lines


def invariants(facts: DrillFacts) -> list[str]:
    return []


def held(facts: DrillFacts) -> list[str]:
    return []
