"""The cluster policy: judge each task as a DAG file is parsed, and warn, refuse or protect.

Hook it in from ``airflow_local_settings.py``::

    from airflow_crashsafe.policy import task_policy  # noqa: F401

``[crashsafe] policy_mode`` decides what it does (docs/scan.md, "The cluster policy"):

- ``off`` (default): nothing, not even the judging;
- ``warn``: log each task a re-run would harm, with the reason and the fix, and record it in the
  crashsafe store for the UI's risk map (once per task and process; a store that cannot be
  reached is given up on for the process, with one warning, and never fails the parse);
- ``enforce``: refuse the DAG (an ``AirflowClusterPolicyViolation``, shown as the file's import
  error) when a task is risky, unless it is protected or declared with ``replay_safe(task,
  reason=...)``;
- ``protect``: warn, and where it can be done without changing what the task does
  (:mod:`.protect`), give it crashsafe's protection in place: an ``HttpOperator`` with a mutating
  method gets a run-derived idempotency key and the ledger, a ``SQLExecuteQueryOperator`` whose
  single statement writes one known table gets a fenced transaction.

The policy never raises anything but the refusal: a task it cannot judge is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_crashsafe import config

__all__ = ["task_policy"]

log = logging.getLogger(__name__)
_WARNED: set[tuple[str, str, str]] = set()


def task_policy(task: Any) -> None:
    """Airflow's ``task_policy`` hook: see the module docstring."""
    mode = config.policy_mode()
    if mode == "off":
        return
    dag = getattr(task, "dag", None)
    if dag is None:
        return
    from airflow_crashsafe.scan.rules import classify_task

    try:
        finding = classify_task(task, dag)
    except Exception:  # the policy must never break parsing over its own limits
        log.debug("crashsafe policy: could not judge %s", getattr(task, "task_id", task), exc_info=True)
        return
    if finding.verdict != "risky":
        return
    if mode == "protect":
        from airflow_crashsafe.policy.protect import protect

        how = protect(task, finding)
        if how:
            log.info("crashsafe policy: %s.%s protected: %s", dag.dag_id, task.task_id, how)
            return
    if mode == "enforce":
        from airflow.exceptions import AirflowClusterPolicyViolation

        raise AirflowClusterPolicyViolation(
            f"crashsafe: task {task.task_id!r} of DAG {dag.dag_id!r} is unsafe to re-run "
            f"({finding.category}: {_why(finding)}). Fix: {finding.fix or 'use a crashsafe operator'}; "
            "or, if a re-run is harmless, wrap it in replay_safe(task, reason=...)."
        )
    key = (dag.dag_id, task.task_id, finding.category)
    if key not in _WARNED:  # a dag-processor parses each file again and again
        _WARNED.add(key)
        _record(dag, task, finding)
        log.warning(
            "crashsafe policy: %s.%s is unsafe to re-run (%s: %s). Fix: %s",
            dag.dag_id,
            task.task_id,
            finding.category,
            _why(finding),
            finding.fix or "use a crashsafe operator",
        )


_RECORDING = [True]


def _record(dag: Any, task: Any, finding: Any) -> None:
    """Keep the risky task's verdict in the store's scan results (the risk map reads them)."""
    if not _RECORDING[0]:
        return
    import time

    from airflow_crashsafe.scan.loader import judge
    from airflow_crashsafe.store import open_store
    from airflow_crashsafe.store.scans import record_task

    try:
        verdict = judge(dag, task).as_dict()
        with open_store().transaction() as db:
            record_task(db, verdict, scanned_at=time.time())
    except Exception as exc:
        _RECORDING[0] = False
        log.warning("crashsafe policy: not recording risky tasks in the store in this process: %s", exc)


def _why(finding: Any) -> str:
    reasons = finding.reasons[:2]
    return "; ".join(f"{r.why} [{r.evidence}]" if r.evidence else r.why for r in reasons)
