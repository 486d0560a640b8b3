"""Which runs are recovery re-runs, and how urgent each is (docs/design.md, "Recovery admission").

A run is a **recovery re-run** when an earlier try of its task instance did not end by itself: the
audit (``crashsafe_attempts``) has an earlier try whose end its own process never reported (it was
reset, lost with its worker, or failed by the scheduler's heartbeat timeout), or it has no record
of the earlier tries at all (the audit off or behind: a re-run is then assumed, which costs one
short statement when places are free). A first try, and a retry after the task's own failure, are
never delayed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.identity import attempt_from_context, slot_from_context
from airflow_crashsafe.store import attempts
from airflow_crashsafe.store.admission import NO_DEADLINE
from airflow_crashsafe.store.store import Store

__all__ = ["Deadline", "Verdict", "deadline_epoch", "downstream_count", "recovery_verdict"]

log = logging.getLogger(__name__)

#: A deadline as operators take it: a moment, a time of day (after the run starts), or ISO text.
Deadline = datetime | time | str


@dataclass(frozen=True)
class Verdict:
    """Whether this run is a recovery re-run, and the fact that says so (for the log)."""

    recovery: bool
    reason: str


def recovery_verdict(context: Mapping[str, Any], store: Store) -> Verdict:
    """Decide from ``try_number`` and the audit's record of the earlier tries (see the module doc)."""
    slot, attempt = slot_from_context(context), attempt_from_context(context)
    try_number = attempt.try_number
    if try_number <= 1:
        return Verdict(False, "first try")
    with store.transaction(immediate=False) as db:
        rows = attempts.task_instance_rows(
            db, dag_id=slot.dag_id, task_id=slot.task_id, map_index=slot.map_index, run_id=attempt.run_id
        )
    earlier = [r for r in rows if int(r["try_number"]) < try_number]
    if not earlier:
        return Verdict(True, f"try {try_number} with no record of the earlier tries")
    unreported = sorted({int(r["try_number"]) for r in earlier if r.get("end_source") != "listener"})
    if unreported:
        return Verdict(True, f"try {unreported[-1]} never reported its own end (reset, lost or timed out)")
    return Verdict(False, "the earlier tries ended by themselves (a normal retry)")


def downstream_count(context: Mapping[str, Any]) -> int:
    """How many tasks depend on this one, directly or not (0 when the context has no task)."""
    task = context.get("task")
    if task is None:
        return 0
    try:
        return len(task.get_flat_relative_ids(upstream=False))
    except Exception:  # a task outside a DAG, or a stand-in: rank it as depended on by nothing
        log.debug("crashsafe: cannot count the downstream tasks of %r", task, exc_info=True)
        return 0


def _run_start(context: Mapping[str, Any]) -> datetime:
    dag_run = context.get("dag_run")
    for name in ("run_after", "start_date", "logical_date"):
        value = getattr(dag_run, name, None)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return datetime.now(timezone.utc)


def _parse(value: str) -> datetime | time:
    try:
        return time.fromisoformat(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise ConfigurationError(
            f"deadline={value!r}: give a datetime, a time of day ('06:00', '06:00+01:00') or an ISO "
            "date and time."
        ) from None


def deadline_epoch(deadline: Deadline | None, context: Mapping[str, Any]) -> float:
    """The deadline as seconds since the epoch; a time of day is its first occurrence after the run starts.

    No deadline ranks last (:data:`~airflow_crashsafe.store.admission.NO_DEADLINE`).
    """
    if deadline is None or deadline == "":
        return NO_DEADLINE
    value = _parse(deadline) if isinstance(deadline, str) else deadline
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    zone = value.tzinfo or timezone.utc
    start = _run_start(context).astimezone(zone)
    moment = datetime.combine(start.date(), value.replace(tzinfo=None), tzinfo=zone)
    if moment < start:
        moment += timedelta(days=1)
    return moment.timestamp()
