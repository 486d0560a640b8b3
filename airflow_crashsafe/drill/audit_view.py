"""The audit's view of the drill: every slot that ran more than once, as the audit classifies it.

After the runs, the drill does what an operator would: ``airflow-crashsafe audit reconcile``
against the drill's api-server (SimpleAuthManager ``all_admins``: no token) fills in the attempt
ends no hook reported — a reset attempt fires none — then ``airflow-crashsafe duplicates``' own
:func:`~airflow_crashsafe.audit.cli.find_duplicates` classifies the records. The drill only turns
its :class:`~airflow_crashsafe.audit.classify.SlotReport` objects into facts. Per reset pair
(a replaced execution and the try that re-ran it) it also says how long both ran at once, as
measured from the records (the replaced process's last sign of life, not its archive time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow_crashsafe.drill.extra_facts import AuditFact

__all__ = ["ResetPair", "audit_facts", "fact_from_report", "reset_pairs", "reset_summary"]


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


def reset_pairs(report: Any) -> list[ResetPair]:
    """The reset re-runs among a :class:`SlotReport`'s re-runs, oldest first."""
    task = report.task_id + (f"[{report.map_index}]" if report.map_index >= 0 else "")
    return [
        ResetPair(
            task_id=task,
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
    task = report.task_id + (f"[{report.map_index}]" if report.map_index >= 0 else "")
    return AuditFact(
        task_id=task,
        executions=len(report.executions),
        processes=[f"{e.hostname} {e.pid}".strip() for e in report.executions],
        overlap_seconds=round(float(report.overlap_seconds), 1),
        kinds=list(report.kinds),
        protection=str(report.protection),
        risk=str(report.risk),
        end_sources=[e.end_source for e in report.executions],
    )


def audit_facts(
    store_url: str, api_url: str, dag_ids: dict[str, str], spool_dir: Path | None = None
) -> tuple[dict[str, list[AuditFact]], str]:
    """Reconcile against ``api_url``, then ``{side: duplicate slots of its DAG}`` and a summary line.

    ``spool_dir`` (the drill's ``$AIRFLOW_HOME/crashsafe-spool``) is delivered first: a task
    process that exited right after spooling an event left it for the next drainer, and the
    drill's own process is the last one that will run.
    """
    from airflow_crashsafe.audit.cli import find_duplicates
    from airflow_crashsafe.audit.reconcile import AirflowApi, reconcile
    from airflow_crashsafe.audit.spool import deliver
    from airflow_crashsafe.store.store import open_store

    store = open_store(store_url)
    delivered = deliver(store, spool_dir) if spool_dir is not None else 0
    done = reconcile(store, AirflowApi(api_url, timeout=30.0), grace=timedelta(0))
    summary = (
        f"audit reconcile: {delivered} spooled events delivered, {done.task_instances} task instances, "
        f"{done.ends_filled} ends filled, {done.tries_added} tries added, {len(done.errors)} errors"
    )
    reports = {
        side: find_duplicates(store, since=timedelta(hours=12), dag_id=dag_id)
        for side, dag_id in dag_ids.items()
    }
    summary += "; " + "; ".join(reset_summary(side, found) for side, found in reports.items())
    return {side: [fact_from_report(r) for r in found] for side, found in reports.items()}, summary
