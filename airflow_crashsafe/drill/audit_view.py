"""The audit's view of the drill: every slot that ran more than once, as the audit classifies it.

After the runs, the drill does what an operator would: ``airflow-crashsafe audit reconcile``
against the drill's api-server (SimpleAuthManager ``all_admins``: no token) fills in the attempt
ends no hook reported — a reset attempt fires none — then ``airflow-crashsafe duplicates``' own
:func:`~airflow_crashsafe.audit.cli.find_duplicates` classifies the records. The drill only turns
its :class:`~airflow_crashsafe.audit.classify.SlotReport` objects into facts.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow_crashsafe.drill.extra_facts import AuditFact

__all__ = ["audit_facts", "fact_from_report"]


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
    store_url: str, api_url: str, dag_ids: dict[str, str]
) -> tuple[dict[str, list[AuditFact]], str]:
    """Reconcile against ``api_url``, then ``{side: duplicate slots of its DAG}`` and a summary line."""
    from airflow_crashsafe.audit.cli import find_duplicates
    from airflow_crashsafe.audit.reconcile import AirflowApi, reconcile
    from airflow_crashsafe.store.store import open_store

    store = open_store(store_url)
    done = reconcile(store, AirflowApi(api_url, timeout=30.0), grace=timedelta(0))
    summary = (
        f"audit reconcile: {done.task_instances} task instances, {done.ends_filled} ends filled, "
        f"{done.tries_added} tries added, {len(done.errors)} errors"
    )
    facts = {
        side: [fact_from_report(r) for r in find_duplicates(store, since=timedelta(hours=12), dag_id=dag_id)]
        for side, dag_id in dag_ids.items()
    }
    return facts, summary
