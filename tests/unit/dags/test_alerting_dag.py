"""The alerting DAG's shape, its settings checks, and how findings fold into incidents."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.dags import build_alerting_dag
from airflow_crashsafe.dags.alerting import AlertingSettings
from airflow_crashsafe.dags.findings import condition, finding, fold
from airflow_crashsafe.errors import ConfigurationError

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)
CHECKS = ["ping_dead_mans_switch", "check_heartbeats", "find_stuck_tasks", "reconcile_audit"]


def test_dag_structure() -> None:
    """Every minute, one run at a time, no retries; four checks, an all-done alert, then the round trip."""
    dag = build_alerting_dag()
    assert dag.dag_id == "crashsafe_alerting"
    assert dag.schedule == "* * * * *"
    assert type(dag.timetable).__name__ == "CronTriggerTimetable"
    assert (dag.max_active_runs, dag.catchup, dag.is_paused_upon_creation) == (1, False, False)
    assert dag.dagrun_timeout == timedelta(minutes=10)
    assert sorted(dag.task_ids) == sorted([*CHECKS, "alert", "triggerer_round_trip"])
    alert = dag.get_task("alert")
    assert alert.trigger_rule == "all_done"
    assert alert.upstream_task_ids == set(CHECKS)
    round_trip = dag.get_task("triggerer_round_trip")
    assert round_trip.upstream_task_ids == {"alert"}
    assert round_trip.trigger_rule == "all_success"  # a failed alert task still fails the run
    # The run's state is the round trip's: it succeeds only when the alert task ran and a
    # triggerer answered a deferral, so a stalled triggerer fails the canary.
    assert [t.task_id for t in dag.leaves] == ["triggerer_round_trip"]
    for task in dag.tasks:
        assert task.retries == 0
        assert task.execution_timeout is not None
        assert task.execution_timeout <= timedelta(minutes=5)


def test_alerting_uses_no_airflow_callbacks() -> None:
    """No failure/success/retry callback anywhere: alerts go through the sinks only."""
    dag = build_alerting_dag()
    assert not dag.on_failure_callback
    assert not dag.on_success_callback
    for task in dag.tasks:
        for name in (
            "on_failure_callback",
            "on_retry_callback",
            "on_success_callback",
            "on_execute_callback",
        ):
            assert not getattr(task, name), (task.task_id, name)


def test_example_file_is_the_canary_the_watchdog_expects() -> None:
    """dags_examples/crashsafe_alerting.py yields the DAG id its docs tell the watchdog to watch."""
    from airflow.dag_processing.dagbag import DagBag

    path = Path(__file__).resolve().parents[3] / "dags_examples" / "crashsafe_alerting.py"
    bag = DagBag(dag_folder=str(path), safe_mode=False)
    assert bag.import_errors == {}
    assert list(bag.dags) == ["crashsafe_alerting"]
    assert "--canary-dag-id crashsafe_alerting" in (bag.dags["crashsafe_alerting"].doc_md or "")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"expect_triggerer": "maybe"}, "expect_triggerer must be one of"),
        ({"threshold_seconds": 0}, "threshold_seconds = 0 is out of range"),
        ({"threshold_seconds": float("nan")}, "threshold_seconds = nan is not a finite number"),
        ({"request_timeout": float("inf")}, "request_timeout = inf is not a finite number"),
        ({"grace": timedelta(seconds=-1)}, "grace must be a non-negative timedelta"),
    ],
)
def test_bad_settings_fail_at_parse_time(kwargs: dict[str, object], message: str) -> None:
    """A bad argument raises ConfigurationError when the DAG is built (an import error, not a silent DAG)."""
    with pytest.raises(ConfigurationError, match=message):
        build_alerting_dag(**kwargs)  # type: ignore[arg-type]


def dead(check: str = "heartbeats") -> dict[str, object]:
    """A finding with one critical condition."""
    return finding(check, conditions=[condition("scheduler_dead", "critical", "scheduler dead", began_at=T0)])


def test_fold_pages_after_grace_repeats_and_resolves_with_one_dedup_key() -> None:
    """Trigger after the grace, silence, repeat at the interval, resolve when gone: one dedup key."""
    kw = {"grace": 60.0, "repeat_interval": 600.0, "instance": "t"}
    incidents, alerts = fold({}, [dead()], T0, **kw)
    assert alerts == []
    incidents, alerts = fold(incidents, [dead()], T0 + timedelta(seconds=60), **kw)
    assert [a.event for a in alerts] == ["trigger"]
    key = alerts[0].dedup_key
    assert key.startswith("airflow-crashsafe:t:heartbeats:scheduler_dead:")
    incidents, alerts = fold(incidents, [dead()], T0 + timedelta(seconds=120), **kw)
    assert alerts == []
    incidents, alerts = fold(incidents, [dead()], T0 + timedelta(seconds=660), **kw)
    assert [(a.event, a.dedup_key) for a in alerts] == [("repeat", key)]
    incidents, alerts = fold(incidents, [finding("heartbeats")], T0 + timedelta(seconds=700), **kw)
    assert [(a.event, a.dedup_key) for a in alerts] == [("resolve", key)]
    assert incidents == {}


def test_fold_keeps_incidents_of_checks_that_did_not_look() -> None:
    """A skipped or incomplete check neither resolves its open incidents nor drops them."""
    kw = {"grace": 0.0, "repeat_interval": 0.0, "instance": "t"}
    incidents, alerts = fold({}, [dead()], T0, **kw)
    assert [a.event for a in alerts] == ["trigger"]
    for looked in (finding("heartbeats", ran=False), finding("heartbeats", complete=False), finding("other")):
        kept, alerts = fold(incidents, [looked], T0 + timedelta(seconds=60), **kw)
        assert alerts == []
        assert kept == incidents


def test_builder_arguments_are_the_settings_fields_with_the_same_defaults() -> None:
    """build_alerting_dag() takes every AlertingSettings field, defaulting exactly as the settings do."""
    params = inspect.signature(build_alerting_dag).parameters
    for field in dataclasses.fields(AlertingSettings):
        assert field.name in params, field.name
        assert params[field.name].default == field.default, field.name
