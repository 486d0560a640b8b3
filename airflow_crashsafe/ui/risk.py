"""Runs at risk: which queued or running runs have a deadline, and will they make it?

The deadlines are the watchdog's: the ``[[deadlines]]`` of the file ``[crashsafe]
deadlines_config`` names (parsed by :func:`~airflow_crashsafe.watchdog.deadlines.parse_deadlines`,
each occurrence's run picked by :func:`~airflow_crashsafe.watchdog.deadline_rules.watched_run`),
plus the ``deadline`` rows Airflow's own ``DeadlineAlert`` definitions wrote for runs. The forecast
is the watchdog's too (:func:`~airflow_crashsafe.watchdog.forecast.forecast_finish` over the
median of recent successful durations), so the page and the page a watchdog sends agree. Pure: the
reads are :mod:`airflow_crashsafe.ui.metadata`'s. See docs/runs-at-risk.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.ui.models import RunAtRisk, TaskRemaining
from airflow_crashsafe.watchdog.deadline_rules import AIRFLOW_NAME, watched_run
from airflow_crashsafe.watchdog.deadlines import Deadline, parse_deadlines
from airflow_crashsafe.watchdog.forecast import DONE_STATES, TaskProgress, expected_durations, forecast_finish
from airflow_crashsafe.watchdog.runs import GOING, AirflowDeadline, RunView
from airflow_crashsafe.watchdog.settings import DEFAULTS, watch_number

__all__ = ["Due", "Rules", "due_runs", "judge", "load_rules"]

#: The watchdog's ``[watch]`` defaults for the numbers the page uses.
DEFAULT_KEEP: float = DEFAULTS["deadline_keep"]
DEFAULT_DURATION: float = DEFAULTS["deadline_default_duration"]
DEFAULT_HISTORY: int = DEFAULTS["deadline_history"]


@dataclass(frozen=True)
class Rules:
    """The ``[[deadlines]]`` and the ``[watch]`` numbers the forecast uses, as the watchdog reads them."""

    deadlines: tuple[Deadline, ...] = ()
    keep: float = DEFAULT_KEEP
    default_duration: float = DEFAULT_DURATION
    history: int = DEFAULT_HISTORY


@dataclass(frozen=True)
class Due:
    """One queued or running run that must be done by ``at`` (a rule's occurrence or Airflow's row)."""

    deadline: str
    source: str  # "crashsafe" or "airflow"
    at: datetime
    run: RunView
    dag_id: str


def _number(watch: Mapping[str, object], name: str, path: str) -> float:
    """A ``[watch]`` number as the watchdog reads it: its default, or checked against its limit."""
    value = watch.get(name)
    return float(DEFAULTS[name]) if value is None else watch_number(name, value, f"{path}: [watch] {name}")


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> Rules:
    from airflow_crashsafe.alerting.config import load_config_file

    data = load_config_file(path)
    watch = data.get("watch") or {}
    if not isinstance(watch, Mapping):
        raise ConfigurationError(f"{path}: [watch] must be a table")
    return Rules(
        parse_deadlines(data.get("deadlines"), path),
        keep=_number(watch, "deadline_keep", path),
        default_duration=_number(watch, "deadline_default_duration", path),
        history=int(_number(watch, "deadline_history", path)),
    )


def load_rules(path: str | None) -> Rules:
    """The rules of ``path`` (re-read when the file changes); no path: none."""
    if not path:
        return Rules()
    try:
        mtime = os.stat(path).st_mtime
    except OSError as exc:
        raise ConfigurationError(
            f"[crashsafe] deadlines_config {path!r} cannot be read ({exc.strerror or exc}): point it at "
            "the watchdog's config file, or leave it empty"
        ) from None
    return _load(path, mtime)


def due_runs(
    rules: Rules,
    runs: Mapping[str, Sequence[RunView]],
    airflow: Sequence[AirflowDeadline],
    now: datetime,
) -> list[Due]:
    """The queued or running runs each deadline watches now: each rule occurrence's run (the
    watchdog's choice), then each of Airflow's rows whose run is among ``runs`` or still going."""
    found: list[Due] = []
    for deadline in rules.deadlines:
        dag_runs = runs.get(deadline.dag_id)
        if not dag_runs:
            continue
        for occurrence in deadline.occurrences(now, rules.keep):
            run = watched_run(dag_runs, deadline, occurrence)
            if run is not None and run.state in GOING:
                found.append(Due(deadline.name, "crashsafe", occurrence.at, run, deadline.dag_id))
    for row in airflow:
        run = next((r for r in runs.get(row.dag_id, ()) if r.run_id == row.run_id), None)
        if run is not None and run.state in GOING:
            name = f"{AIRFLOW_NAME}{row.name or 'deadline'}"
            found.append(Due(name, "airflow", row.at, run, row.dag_id))
    return found


def _state_of(task: str, tis: Sequence[TaskProgress]) -> str | None:
    """The task's state; a mapped task's least advanced index (pending before running before done)."""
    states = [ti.state for ti in tis if ti.task_id == task]
    if not states:
        return None
    pending = [s for s in states if s not in DONE_STATES]
    return min(pending, key=lambda s: s == "running") if pending else states[0]


def judge(
    due: Due,
    downstream: Mapping[str, Sequence[str]] | None,
    durations: Mapping[str, Sequence[float]],
    tis: Sequence[TaskProgress],
    now: datetime,
    default_duration: float,
) -> RunAtRisk:
    """The run's forecast against its deadline; ``downstream`` None: its DAG could not be read."""
    missed = now >= due.at
    base = RunAtRisk(
        dag_id=due.dag_id,
        run_id=due.run.run_id,
        run_state=due.run.state,
        run_after=due.run.run_after,
        deadline=due.deadline,
        source=due.source,
        deadline_at=due.at,
        forecast_finish=None,
        slack_seconds=None,
        state="missed" if missed else "on_track",
        critical_path=[],
    )
    if not downstream:
        note = "no forecast: the DAG's tasks are not in the metadata database (is it parsed?)"
        return base.model_copy(update={"note": note})
    expected = expected_durations(durations, downstream, default_duration)
    forecast = forecast_finish(downstream, tis, expected, now)
    slack = (due.at - forecast.finish).total_seconds()
    state = "missed" if missed else ("at_risk" if slack < 0 else "on_track")
    path = [
        TaskRemaining(task_id=task, remaining_seconds=round(left, 1), state=_state_of(task, tis))
        for task, left in forecast.critical_path
    ]
    return base.model_copy(
        update={
            "forecast_finish": forecast.finish,
            "slack_seconds": round(slack, 1),
            "state": state,
            "critical_path": path,
        }
    )
