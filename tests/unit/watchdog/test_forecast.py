"""The forecast finish of a run: critical path, a running task's remainder, no history."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.watchdog.forecast import TaskProgress, expected_durations, forecast_finish
from airflow_crashsafe.watchdog.runs import graph_from_serialized, graph_from_tasks

NOW = datetime(2026, 3, 1, 4, 0, tzinfo=timezone.utc)
#: extract → (transform_a: 600 s, transform_b: 60 s) → load (120 s)
DAG = {
    "extract": ("transform_a", "transform_b"),
    "transform_a": ("load",),
    "transform_b": ("load",),
    "load": (),
}
HISTORY = {
    "extract": (300.0, 320.0, 310.0),
    "transform_a": (600.0, 590.0, 610.0),
    "transform_b": (60.0,),
    "load": (120.0,),
}


def expected(default: float = 100.0) -> dict[str, float]:
    return expected_durations(HISTORY, DAG, default)


def test_nothing_started_takes_the_longest_branch() -> None:
    """With no task started, the forecast is the longest path of medians and names its tasks."""
    forecast = forecast_finish(DAG, (), expected(), NOW)
    assert forecast.remaining_seconds == 310 + 600 + 120
    assert [task for task, _ in forecast.critical_path] == ["extract", "transform_a", "load"]
    assert forecast.finish == NOW + timedelta(seconds=1030)


def test_running_task_counts_only_its_remainder() -> None:
    """A task running for 500 s of its 600 s median has 100 s left; done tasks count nothing."""
    progress = [
        TaskProgress("extract", "success"),
        TaskProgress("transform_a", "running", NOW - timedelta(seconds=500)),
        TaskProgress("transform_b", "success"),
    ]
    forecast = forecast_finish(DAG, progress, expected(), NOW)
    assert forecast.remaining_seconds == pytest.approx(100 + 120)
    assert forecast.critical_path == (("transform_a", 100.0), ("load", 120.0))


def test_running_past_its_median_counts_zero_not_negative() -> None:
    """A task running longer than its history says has 0 left (never a negative remainder)."""
    progress = [TaskProgress("extract", "running", NOW - timedelta(hours=2))]
    assert forecast_finish(DAG, progress, expected(), NOW).remaining_seconds == 600 + 120


def test_task_without_history_gets_the_default() -> None:
    """A task that never succeeded weighs the configured default."""
    durations = expected_durations({"extract": (10.0,)}, DAG, default=1000.0)
    assert durations == {"extract": 10.0, "transform_a": 1000.0, "transform_b": 1000.0, "load": 1000.0}
    assert forecast_finish(DAG, (), durations, NOW).remaining_seconds == 10 + 1000 + 1000


def test_median_not_mean() -> None:
    """One outlier try does not move the expectation: the median of the last tries is used."""
    assert expected_durations({"t": (10.0, 11.0, 9000.0)}, ["t"], 1.0) == {"t": 11.0}


def test_mapped_task_is_done_only_when_every_index_is() -> None:
    """A mapped task with one index still queued counts its full expected duration."""
    progress = [
        TaskProgress("extract", "success", map_index=0),
        TaskProgress("extract", "queued", map_index=1),
    ]
    assert forecast_finish(DAG, progress, expected(), NOW).remaining_seconds == 310 + 600 + 120


def test_failed_task_counts_as_a_rerun() -> None:
    """A failed or up-for-retry task must run again: its full duration counts."""
    progress = [TaskProgress("extract", "success"), TaskProgress("transform_a", "up_for_retry")]
    assert forecast_finish(DAG, progress, expected(), NOW).remaining_seconds == 600 + 120


def test_finished_run_forecasts_now() -> None:
    """Everything done: the forecast is now and the critical path is empty."""
    progress = [TaskProgress(task, "success") for task in DAG]
    forecast = forecast_finish(DAG, progress, expected(), NOW)
    assert (forecast.finish, forecast.critical_path) == (NOW, ())


def test_long_chain_needs_no_recursion() -> None:
    """A 5,000-task chain forecasts (no recursion limit)."""
    chain = {f"t{i}": ((f"t{i + 1}",) if i < 4999 else ()) for i in range(5000)}
    forecast = forecast_finish(chain, (), dict.fromkeys(chain, 1.0), NOW)
    assert forecast.remaining_seconds == 5000
    assert len(forecast.critical_path) == 5000


def test_graph_from_api_tasks_and_serialized_dag() -> None:
    """The REST tasks list and a serialized_dag row (plain or zlib-compressed) give the same graph."""
    import json
    import zlib

    api = [{"task_id": "a", "downstream_task_ids": ["b"]}, {"task_id": "b", "downstream_task_ids": []}]
    data = {
        "__version": 3,
        "dag": {
            "tasks": [
                {"__type": "operator", "__var": {"task_id": "a", "downstream_task_ids": ["b"]}},
                {"__type": "operator", "__var": {"task_id": "b"}},
            ]
        },
    }
    expected_graph = {"a": ("b",), "b": ()}
    assert graph_from_tasks(api) == expected_graph
    assert graph_from_serialized(data) == expected_graph
    assert graph_from_serialized(json.dumps(data)) == expected_graph
    assert graph_from_serialized(None, zlib.compress(json.dumps(data).encode())) == expected_graph
