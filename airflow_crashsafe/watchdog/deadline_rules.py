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
is forgotten without a resolve. With ``watch_airflow_deadlines``, each ``deadline`` row that
Airflow's own DeadlineAlerts created for a run pages the same way (named ``airflow:<alert>``),
so a deadline declared once in the DAG pages while the scheduler that evaluates it is dead.
See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from airflow_crashsafe.alerting.incidents import Condition, Incident, advance
from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.claims import ClaimDir
from airflow_crashsafe.watchdog.deadlines import Deadline, Occurrence
from airflow_crashsafe.watchdog.forecast import expected_durations, forecast_finish
from airflow_crashsafe.watchdog.health import Observation
from airflow_crashsafe.watchdog.runs import DagRuns, RunReader, RunView

__all__ = ["DEADLINE_PREFIX", "DeadlineWatch", "build_deadline_watch", "deadline_conditions", "watched_run"]

DEADLINE_PREFIX = "deadline_"
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


def _conditions(
    deadline: Deadline,
    occurrence: Occurrence,
    run: RunView | None,
    view: DagRuns,
    now: datetime,
    default_duration: float,
    at_risk_open: Callable[[str], bool],
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
    if deadline.early and ((now < occurrence.at and late) or at_risk_open(risk_key)):
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
    at_risk_open: Callable[[str], bool] = lambda key: False,
) -> dict[str, Condition]:
    """What is wrong right now with ``deadline``'s occurrences, given its DAG's runs."""
    found: dict[str, Condition] = {}
    for occurrence in deadline.occurrences(now, keep):
        run = watched_run(view.runs, deadline, occurrence)
        found.update(_conditions(deadline, occurrence, run, view, now, default_duration, at_risk_open))
    return found


def airflow_deadline_conditions(
    view: DagRuns,
    now: datetime,
    *,
    severity: str,
    default_duration: float,
    at_risk_open: Callable[[str], bool] = lambda key: False,
) -> dict[str, Condition]:
    """The same pages for the ``deadline`` rows of Airflow's own DeadlineAlerts on this DAG's runs.

    Each row names its run and its instant, so it is one occurrence whose window is the run's own
    ``run_after``. A row whose run is not among the runs read (deleted) is skipped.
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
        found.update(_conditions(deadline, occurrence, run, view, now, default_duration, at_risk_open))
    return found


@dataclass
class DeadlineWatch:
    """The deadlines of one watchdog and how they page (see the module docstring)."""

    deadlines: tuple[Deadline, ...]
    instance: str
    repeat_interval: float = 3600.0
    keep: float = 86400.0
    default_duration: float = 300.0
    claims: ClaimDir | None = None
    #: Severity of the pages for Airflow's own DeadlineAlerts; None: those are not watched.
    airflow_severity: str | None = None

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(DEADLINE_PREFIX)

    def wanted(self, now: datetime) -> dict[str, datetime]:
        """Per watched DAG, the oldest ``run_after`` any occurrence being watched can have."""
        out: dict[str, datetime] = {}
        for deadline in self.deadlines:
            for occurrence in deadline.occurrences(now, self.keep):
                since = out.get(deadline.dag_id)
                out[deadline.dag_id] = min(since, occurrence.due_from) if since else occurrence.due_from
        return out

    def evaluate(
        self, incidents: Mapping[str, Incident], observation: Observation, enqueue: Callable[[Alert], Any]
    ) -> tuple[dict[str, Incident], list[Alert]]:
        """Fold one observation into the deadline incidents; spool their alerts with ``enqueue``."""
        now = observation.at
        oldest = now - timedelta(seconds=self.keep)
        current = {  # an occurrence past ``keep`` is forgotten (it stays open in the sink, if it was)
            key: i
            for key, i in incidents.items()
            if datetime.fromisoformat(str(i.details.get("deadline_utc") or now.isoformat())) > oldest
        }
        views = {dag: view for dag, view in (observation.deadline_dags or {}).items() if view.error is None}
        theirs = {dag for dag, view in views.items() if view.airflow_deadlines is not None}
        active: dict[str, Condition] = {}
        for deadline in self.deadlines:
            if deadline.dag_id in views:
                view = views[deadline.dag_id]
                found = deadline_conditions(
                    deadline,
                    view,
                    now,
                    keep=self.keep,
                    default_duration=self.default_duration,
                    at_risk_open=lambda key: key in current,
                )
                active.update(found)
        for dag in theirs if self.airflow_severity else ():
            assert self.airflow_severity is not None
            found = airflow_deadline_conditions(
                views[dag],
                now,
                severity=self.airflow_severity,
                default_duration=self.default_duration,
                at_risk_open=lambda key: key in current,
            )
            active.update(found)

        def judged(key: str) -> bool:
            details = current[key].details
            airflow = str(details.get("deadline", "")).startswith(AIRFLOW_NAME)
            return details.get("dag_id") in (theirs if airflow else views)

        result, alerts = advance(
            current,
            active,
            now,
            grace=0.0,
            repeat_interval=self.repeat_interval,
            instance=self.instance,
            judged=judged,
        )
        if self.claims is not None:
            return result, self.claims.admit(alerts, enqueue, self.repeat_interval)
        for alert in alerts:
            enqueue(alert)
        return result, alerts


def build_deadline_watch(
    config: str | None, opts: Mapping[str, Any], instance: str, repeat_interval: float
) -> tuple[DeadlineWatch, RunReader] | None:
    """The watch and the run reader for ``[[deadlines]]`` and ``watch_airflow_deadlines``; else None."""
    from airflow_crashsafe.alerting.config import load_config_file
    from airflow_crashsafe.watchdog.deadlines import parse_deadlines, severity_option

    deadlines = parse_deadlines(load_config_file(config).get("deadlines")) if config else ()
    airflow = opts.get("watch_airflow_deadlines") or False
    if not isinstance(airflow, bool):
        airflow = severity_option("watch_airflow_deadlines", airflow)
    if not deadlines and not airflow:
        return None
    names = ("deadline_keep", "deadline_default_duration", "deadline_refresh", "deadline_history")
    try:
        numbers = {k: float(opts[k]) for k in names}
    except (TypeError, ValueError):
        numbers = {}
    if len(numbers) < len(names) or min(numbers.values()) <= 0:
        raise ConfigurationError(f"[watch] options {list(names)} must be numbers > 0")
    claim_dir = opts["deadline_claim_dir"]
    watch = DeadlineWatch(
        deadlines,
        instance,
        repeat_interval=repeat_interval,
        keep=numbers["deadline_keep"],
        default_duration=numbers["deadline_default_duration"],
        claims=ClaimDir(claim_dir) if claim_dir else None,
        airflow_severity=("critical" if airflow is True else airflow) if airflow else None,
    )
    reader = RunReader(
        watch.wanted,
        history=max(1, int(numbers["deadline_history"])),
        refresh=numbers["deadline_refresh"],
        airflow_deadlines=bool(airflow),
        keep=watch.keep,
    )
    return watch, reader
