"""Runs at risk, pure part: which run a deadline watches, and how a run is judged against it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.ui.risk import Due, Rules, due_runs, judge, load_rules
from airflow_crashsafe.watchdog.deadlines import parse_deadlines
from airflow_crashsafe.watchdog.forecast import TaskProgress
from airflow_crashsafe.watchdog.runs import AirflowDeadline, RunView

NOW = datetime(2026, 3, 10, 5, 0, tzinfo=timezone.utc)
RULES = Rules(parse_deadlines([{"name": "six", "dag_id": "nightly", "at": "06:00"}]))


def _run(run_id: str, state: str, hours_ago: float) -> RunView:
    return RunView(run_id, "scheduled", state, NOW - timedelta(hours=hours_ago))


def test_a_deadline_watches_the_newest_due_run_as_the_watchdog_does() -> None:
    """A newer run that already succeeded is the one watched: the older running run is not at risk."""
    runs = {"nightly": [_run("new", "success", 1), _run("old", "running", 3)]}
    assert due_runs(RULES, runs, [], NOW) == []
    runs = {"nightly": [_run("new", "running", 1), _run("old", "running", 3)]}
    assert [(d.deadline, d.run.run_id, d.at) for d in due_runs(RULES, runs, [], NOW)] == [
        ("six", "new", NOW + timedelta(hours=1))
    ]


def test_airflow_rows_count_only_for_runs_still_going() -> None:
    """An Airflow deadline row of a finished run is not shown; one of a queued run is, named airflow:."""
    runs = {"d": [_run("done", "success", 2), _run("waiting", "queued", 1)]}
    rows = [
        AirflowDeadline("d", "done", NOW, "sla", NOW - timedelta(hours=2)),
        AirflowDeadline("d", "waiting", NOW, None, NOW - timedelta(hours=1)),
    ]
    assert [(d.deadline, d.source, d.run.run_id) for d in due_runs(Rules(), runs, rows, NOW)] == [
        ("airflow:deadline", "airflow", "waiting")
    ]


def test_judge_states_slack_and_critical_path() -> None:
    """On track with slack, at risk when the forecast is later, missed once the deadline passed."""
    due = Due("six", "crashsafe", NOW + timedelta(minutes=30), _run("r", "running", 1), "nightly")
    graph = {"a": ("b",), "b": ()}
    tis = [TaskProgress("a", "running", NOW - timedelta(minutes=5)), TaskProgress("b", None)]
    history = {"a": (600.0,), "b": (600.0,)}
    on_track = judge(due, graph, history, tis, NOW, 300.0)
    assert on_track.state == "on_track"
    assert on_track.slack_seconds == 1800 - 900
    assert [(t.task_id, t.remaining_seconds, t.state) for t in on_track.critical_path] == [
        ("a", 300.0, "running"),
        ("b", 600.0, None),
    ]
    assert judge(due, graph, {"a": (2400.0,)}, tis, NOW, 300.0).state == "at_risk"
    assert judge(due, graph, history, tis, NOW + timedelta(hours=1), 300.0).state == "missed"
    unparsed = judge(due, None, {}, tis, NOW, 300.0)
    assert unparsed.forecast_finish is None
    assert unparsed.note is not None


def test_rules_file_mistakes_are_configuration_errors(tmp_path: Path) -> None:
    """A missing file, a bad [[deadlines]] entry or a bad [watch] number: one ConfigurationError."""
    with pytest.raises(ConfigurationError, match="deadlines_config"):
        load_rules(str(tmp_path / "absent.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text('[[deadlines]]\ndag_id = "d"\nat = "25:00"\n')
    with pytest.raises(ConfigurationError, match="'at'"):
        load_rules(str(bad))
    bad.write_text('[watch]\ndeadline_history = "ten"\n')
    with pytest.raises(ConfigurationError, match="deadline_history"):
        load_rules(str(bad))
    for key, value in (
        ("deadline_keep", "nan"),
        ("deadline_default_duration", "inf"),
        ("deadline_history", "2.5"),
    ):
        bad.write_text(f"[watch]\n{key} = {value}\n")  # a nan keep or duration would silence the page
        with pytest.raises(
            ConfigurationError, match=rf"^{re.escape(str(bad))}: \[watch\] {key} = \S+ is not a"
        ):
            load_rules(str(bad))
    good = tmp_path / "good.toml"
    good.write_text(
        '[watch]\ndeadline_history = 3\n[[sinks]]\ntype = "log"\n[[deadlines]]\ndag_id = "d"\nat = "06:00"\n'
    )
    rules = load_rules(str(good))
    assert rules.history == 3
    assert [d.dag_id for d in rules.deadlines] == ["d"]
    assert load_rules(None) == Rules()
