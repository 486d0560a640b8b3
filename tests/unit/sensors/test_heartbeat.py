"""SchedulerHeartbeatSensor's input checks, its verdict on an observation, and where it finds the API."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.config import api_url, reset_cache
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sensors import SchedulerHeartbeatSensor
from airflow_crashsafe.sensors.heartbeat import normalize_components, stale_components
from airflow_crashsafe.watchdog.health import JobRecord, Observation

NOW = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def observation(*jobs: JobRecord, db_ok: bool = True, error: str | None = None) -> Observation:
    """An observation at NOW holding ``jobs``."""
    return Observation(at=NOW, source="api", error=error, metadatabase_ok=db_ok, jobs=jobs)


def beat(component: str, age: float, healthy: bool = True) -> JobRecord:
    """A job of ``component`` whose newest heartbeat is ``age`` seconds old."""
    return JobRecord(component, NOW - timedelta(seconds=age), reported_healthy=healthy)


def test_components_accept_aliases_strings_and_drop_repeats() -> None:
    """`dag-processor`, a comma-separated string and repeats normalise to canonical names."""
    assert normalize_components("scheduler, dag-processor,scheduler") == ("scheduler", "dag_processor")
    assert normalize_components(["Triggerer"]) == ("triggerer",)


@pytest.mark.parametrize("bad", [["schedular"], "worker", [], [3]])
def test_unknown_component_is_a_clear_error(bad: object) -> None:
    """An unknown or empty component list raises ConfigurationError naming the valid choices."""
    with pytest.raises(ConfigurationError, match="scheduler, triggerer, dag_processor"):
        normalize_components(bad)  # type: ignore[arg-type]


def test_sensor_rejects_bad_input_at_parse_time() -> None:
    """A typo in components or a non-positive threshold fails when the DAG is parsed."""
    with pytest.raises(ConfigurationError, match="unknown component 'schedular'"):
        SchedulerHeartbeatSensor(task_id="gate", components=["schedular"])
    with pytest.raises(ConfigurationError, match="threshold_seconds = 0 is out of range"):
        SchedulerHeartbeatSensor(task_id="gate", threshold_seconds=0)


@pytest.mark.parametrize("threshold", [float("inf"), float("nan"), "inf", "1e309", 10**9])
def test_sensor_refuses_a_threshold_that_would_call_any_heartbeat_alive(threshold: object) -> None:
    """An infinite (or absurd) threshold would let a dead scheduler's stale heartbeat pass the gate."""
    refused = r"threshold_seconds = .* is (not a finite number|out of range)"
    with pytest.raises(ConfigurationError, match=refused):
        SchedulerHeartbeatSensor(task_id="gate", threshold_seconds=threshold)  # type: ignore[arg-type]


def test_sensor_defers_checks_of_templated_values() -> None:
    """Jinja in components or threshold is checked after rendering, not at parse time."""
    sensor = SchedulerHeartbeatSensor(
        task_id="gate", components="{{ params.components }}", threshold_seconds="{{ params.t }}"
    )
    assert sensor.template_fields == ("threshold_seconds", "components", "api_url")
    assert SchedulerHeartbeatSensor(task_id="gate2", mode="reschedule").mode == "reschedule"


def test_fresh_healthy_components_are_alive() -> None:
    """Components with healthy, fresh heartbeats have no problem."""
    obs = observation(beat("scheduler", 3), beat("triggerer", 5))
    assert stale_components(obs, ("scheduler", "triggerer"), 30) == {}


def test_stale_unhealthy_and_missing_components_are_named() -> None:
    """A stale, an unhealthy and a never-started component each get a reason; the DB is checked."""
    obs = observation(beat("scheduler", 45), beat("triggerer", 5, healthy=False), db_ok=False)
    problems = stale_components(obs, ("scheduler", "triggerer", "dag_processor"), 30)
    assert problems["scheduler"] == "stale: newest heartbeat 45 s ago (threshold 30 s)"
    assert problems["triggerer"].startswith("reported unhealthy")
    assert problems["dag_processor"] == "no such job has ever heartbeated"
    assert "metadatabase" in problems


def test_stricter_threshold_than_airflows_applies() -> None:
    """A heartbeat Airflow still calls healthy is stale under a stricter threshold."""
    assert "scheduler" in stale_components(observation(beat("scheduler", 12)), ("scheduler",), 10)


def test_unreadable_health_is_not_alive() -> None:
    """When the health endpoint cannot be read, every component is reported unknown."""
    problems = stale_components(observation(error="cannot reach x"), ("scheduler",), 30)
    assert problems == {"scheduler": "health unknown: cannot reach x"}


def test_api_url_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit, then [crashsafe] api_url, then the execution API's root, then [api] base_url."""
    for var in (
        "AIRFLOW__CRASHSAFE__API_URL",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AIRFLOW__API__BASE_URL",
    ):
        monkeypatch.delenv(var, raising=False)
    assert api_url() == "http://localhost:8080"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    reset_cache()  # read once per process; a test changing the environment drops the cache
    assert api_url() == "https://airflow.example.com"
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "http://api-svc:8080/sub/execution/")
    reset_cache()
    assert api_url() == "http://api-svc:8080/sub"
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__API_URL", "http://crashsafe:9")
    reset_cache()
    assert api_url() == "http://crashsafe:9"
    assert api_url("http://explicit:1/") == "http://explicit:1"
    with pytest.raises(ConfigurationError, match="must start with http"):
        api_url("localhost:8080")
