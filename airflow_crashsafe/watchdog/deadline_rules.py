"""How deadlines page: missed, early (forecast late), resolved; the same key on every replica.

For each occurrence of each deadline (:mod:`airflow_crashsafe.watchdog.deadlines`) and its run:

* the run succeeded (before or after the deadline) → no condition: nothing pages, and an open
  incident of that occurrence resolves;
* the deadline has passed and the run is not ``success`` (running, failed, or missing because the
  scheduler never created it) → ``deadline_missed:…`` with the configured ``severity``;
* before the deadline, the run's forecast finish (:mod:`airflow_crashsafe.watchdog.forecast`) is
  later than the deadline, or the run failed → ``deadline_at_risk:…`` with ``early_severity``,
  the forecast and the critical path in its details. Once open it stays open until the run
  succeeds (past the deadline the forecast is late by definition), so the early page and the
  missed page are one each. For a cron deadline, a run due but not created yet is forecast as
  the whole DAG starting now.

Both go through the incident engine without grace (the deadline is the threshold) and with a
fixed ``dedup_id`` per (DAG, deadline name, deadline instant): two watchdog replicas with the
same ``--instance`` send the same ``dedup_key``. An occurrence more than ``keep`` seconds past
is forgotten without a resolve. An occurrence whose deadline passed before the watchdog began
watching its rule (``since``, kept by :class:`~airflow_crashsafe.watchdog.state.WatchStarts`)
pages nothing — a rule configured at 10:00 is silent about 06:00 that morning — unless its
incident is already open. With ``watch_airflow_deadlines``, each ``deadline`` row that
Airflow's own DeadlineAlerts created for a run pages the same way (named ``airflow:<alert>``),
so a deadline declared once in the DAG pages while the scheduler that evaluates it is dead.
See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from airflow_crashsafe.alerting.incidents import Condition
from airflow_crashsafe.watchdog.deadlines import Deadline, Occurrence
from airflow_crashsafe.watchdog.forecast import expected_durations, forecast_finish
from airflow_crashsafe.watchdog.runs import DagRuns, RunView

__all__ = ["AIRFLOW_NAME", "airflow_deadline_conditions", "deadline_conditions", "watched_run"]

UTC = ZoneInfo("UTC")
#: How the pages of Airflow's own DeadlineAlerts name their deadline.
AIRFLOW_NAME = "airflow:"


def watched_run(runs: Sequence[RunView], deadline: Deadline, occurrence: Occurrence) -> RunView | None:
    """The newest run of an allowed type that became due in the occurrence's window."""
    due = [
        r
        for r in runs
        if r.run_type in deadline.run_types and occurrence.due_from <= r.run_after < occurrence.due_before
    ]
    return max(due, key=lambda r: r.run_after, default=None)


def _keys(deadline: Deadline, occurrence: Occurrence) -> tuple[str, str, str]:
    ident = f"{deadline.dag_id}:{deadline.name}:{occurrence.at.isoformat()}"
    dedup_id = hashlib.sha256(ident.encode()).hexdigest()[:12]
    return f"deadline_missed:{ident}", f"deadline_at_risk:{ident}", dedup_id


def _watched(
    deadline: Deadline, occurrence: Occurrence, since: datetime | None, is_open: Callable[[str], bool]
) -> bool:
    """Whether the occurrence's deadline passed while watched (or not yet), or it already paged."""
    if since is None or occurrence.at >= since:
        return True
    missed_key, risk_key, _ = _keys(deadline, occurrence)
    return is_open(missed_key) or is_open(risk_key)


def _conditions(
    deadline: Deadline,
    occurrence: Occurrence,
    run: RunView | None,
    view: DagRuns,
    now: datetime,
    default_duration: float,
    is_open: Callable[[str], bool],
) -> dict[str, Condition]:
    """The missed and at-risk conditions of one occurrence and its run (None: no run due)."""
    if run is not None and run.state == "success":
        return {}
    found: dict[str, Condition] = {}
    missed_key, risk_key, dedup_id = _keys(deadline, occurrence)
    local = occurrence.at.astimezone(deadline.tz)
    details: dict[str, Any] = {
        "dag_id": deadline.dag_id,
        "deadline": deadline.name,
        "deadline_at": local.isoformat(),
        "deadline_utc": occurrence.at.isoformat(),
        "run_id": run.run_id if run else None,
        "run_state": run.state if run else "missing",
        "run_due_window": [occurrence.due_from.isoformat(), occurrence.due_before.isoformat()],
    }
    what = f"run {run.run_id} is {run.state}" if run else "no run became due in its window"
    if view.forecast_error:
        details["forecast"] = view.forecast_error
    forecast = None
    if view.downstream and (run is not None or (deadline.cron and occurrence.due_from <= now)):
        expected = expected_durations(view.durations, view.downstream, default_duration)
        forecast = forecast_finish(view.downstream, run.tasks if run else (), expected, now)
        if run is None or run.state != "failed":
            details.update(forecast.describe())
    late = run is not None and run.state == "failed"
    late = late or (forecast is not None and forecast.finish > occurrence.at)
    when = local.strftime("%Y-%m-%d %H:%M %Z")
    if now >= occurrence.at:
        summary = f"DAG {deadline.dag_id} missed its deadline {deadline.name} ({when}): {what}"
        found[missed_key] = Condition(
            missed_key, deadline.severity, summary, occurrence.at, details, 0.0, dedup_id
        )
    if deadline.early and ((now < occurrence.at and late) or is_open(risk_key)):
        if run is not None and run.state == "failed":
            why = f"run {run.run_id} failed"
        elif forecast is not None:
            late_by = (forecast.finish - occurrence.at).total_seconds()
            finish = forecast.finish.astimezone(deadline.tz)
            why = f"forecast finish {finish:%H:%M %Z} ({late_by / 60:+.0f} min)"
        else:
            why = what
        summary = f"DAG {deadline.dag_id} will miss its deadline {deadline.name} ({when}): {why}"
        found[risk_key] = Condition(
            risk_key, deadline.early_severity, summary, now, details, 0.0, dedup_id + "r"
        )
    return found


def deadline_conditions(
    deadline: Deadline,
    view: DagRuns,
    now: datetime,
    *,
    keep: float,
    default_duration: float,
    is_open: Callable[[str], bool] = lambda key: False,
    since: datetime | None = None,
) -> dict[str, Condition]:
    """What is wrong right now with ``deadline``'s occurrences, given its DAG's runs.

    ``since``: when the rule began to be watched; an occurrence due before it is skipped unless
    one of its incidents ``is_open``.
    """
    found: dict[str, Condition] = {}
    for occurrence in deadline.occurrences(now, keep):
        if not _watched(deadline, occurrence, since, is_open):
            continue
        run = watched_run(view.runs, deadline, occurrence)
        found.update(_conditions(deadline, occurrence, run, view, now, default_duration, is_open))
    return found


def airflow_deadline_conditions(
    view: DagRuns,
    now: datetime,
    *,
    severity: str,
    default_duration: float,
    is_open: Callable[[str], bool] = lambda key: False,
    since: datetime | None = None,
) -> dict[str, Condition]:
    """The same pages for the ``deadline`` rows of Airflow's own DeadlineAlerts on this DAG's runs.

    Each row names its run and its instant, so it is one occurrence whose window is the run's own
    ``run_after``. A row whose run is not among the runs read (deleted) is skipped, and so is one
    whose instant passed before ``since`` (when they began to be watched) unless it already paged.
    """
    runs = {run.run_id: run for run in view.runs}
    found: dict[str, Condition] = {}
    for row in view.airflow_deadlines or ():
        run = runs.get(row.run_id)
        if run is None:
            continue
        name = f"{AIRFLOW_NAME}{row.name or 'deadline'}"
        deadline = Deadline(name, row.dag_id, UTC, severity=severity, early_severity=severity)
        occurrence = Occurrence(row.at, row.run_after, row.at)
        if not _watched(deadline, occurrence, since, is_open):
            continue
        found.update(_conditions(deadline, occurrence, run, view, now, default_duration, is_open))
    return found
