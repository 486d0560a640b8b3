"""The deployment files: docker-compose.yaml, Dockerfile and the watchdog's config (validated offline)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yaml").read_text())
    return data


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    """docker-compose.yaml is valid against the Compose Specification's JSON schema."""
    schema = json.loads((REPO / "tests" / "data" / "compose-spec.json").read_text())
    jsonschema.Draft7Validator(schema).validate(compose)


def test_compose_runs_every_airflow_component_and_the_watchdog(compose: dict[str, Any]) -> None:
    """Scheduler, dag-processor, api-server, triggerer and the watchdog are all services."""
    commands = {name: service.get("command") for name, service in compose["services"].items()}
    for component in ("scheduler", "dag-processor", "api-server", "triggerer"):
        assert component in commands.values(), component
    assert commands["crashsafe-watchdog"][0] == "watch"


def test_watchdog_does_not_depend_on_the_scheduler(compose: dict[str, Any]) -> None:
    """The watchdog starts without any Airflow service and never probes the scheduler's health server."""
    watchdog = compose["services"]["crashsafe-watchdog"]
    assert "depends_on" not in watchdog
    assert "8974" not in json.dumps(watchdog)  # the scheduler's own health server port


def test_metadata_database_ends_transactions_left_idle(compose: dict[str, Any]) -> None:
    """The metadata PostgreSQL runs with idle_in_transaction_session_timeout on (a dead scheduler's wedge)."""
    command = compose["services"]["postgres"]["command"]
    assert command[0] == "postgres"
    settings = dict(command[i + 1].split("=", 1) for i, flag in enumerate(command[:-1]) if flag == "-c")
    assert settings["idle_in_transaction_session_timeout"] not in ("", "0")


def test_watch_config_loads_and_builds_its_sinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy/watch.toml is a valid watchdog configuration once its secrets are in the environment."""
    from airflow_crashsafe.alerting.config import build_sinks
    from airflow_crashsafe.watchdog import cli

    monkeypatch.setenv("CRASHSAFE_ALERT_WEBHOOK_URL", "https://alerts.example.com/hook")
    monkeypatch.setenv("CRASHSAFE_ALERT_WEBHOOK_SECRET", "s3cret")
    monkeypatch.setenv("CRASHSAFE_PAGERDUTY_ROUTING_KEY", "R0UTING")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--config", str(REPO / "deploy" / "watch.toml")])
    merged, sink_specs = cli.settings(args)
    assert merged["api_url"] == "http://airflow-apiserver:8080"
    assert merged["canary_dag_id"] == "crashsafe_alerting"
    assert sorted(sink.name for sink in build_sinks(sink_specs)) == ["pagerduty", "webhook"]


def test_image_is_built_on_the_locked_airflow() -> None:
    """The Dockerfile's Airflow image is the version the lock pins."""
    base = re.search(r"^FROM apache/airflow:(\S+)-python(\S+)$", (REPO / "Dockerfile").read_text(), re.M)
    assert base is not None
    airflow_version, python = base.groups()
    lock = (REPO / "constraints" / f"py{python}.txt").read_text()
    assert f"apache-airflow=={airflow_version}\n" in lock


def test_a_watchdog_reads_the_metadata_db_and_heals_a_wedge(compose: dict[str, Any]) -> None:
    """One watchdog reads the metadata DB with --heal, in a state directory of its own."""
    watchdog = compose["services"]["crashsafe-watchdog-db"]
    command = watchdog["command"]
    assert command[0] == "watch"
    assert "--heal" in command
    variable = command[command.index("--db-url-env") + 1]
    assert watchdog["environment"][variable].startswith("postgresql://")
    assert "depends_on" not in watchdog
    state_dirs = {command[command.index("--state-dir") + 1], "/var/lib/crashsafe"}
    assert len(state_dirs) == 2  # never the API watchdog's directory


def test_celery_profile_runs_a_fleet_and_watches_its_workers(compose: dict[str, Any]) -> None:
    """Profile celery: Redis, two workers, a second scheduler and a watchdog on the broker's queues."""
    services = compose["services"]
    fleet = {name for name, service in services.items() if "celery" in service.get("profiles", [])}
    assert fleet == {"redis", "airflow-worker", "airflow-scheduler-2", "crashsafe-watchdog-celery"}
    assert services["airflow-worker"]["command"] == ["celery", "worker"]
    assert services["airflow-worker"]["deploy"]["replicas"] == 2
    assert services["airflow-scheduler-2"]["command"] == "scheduler"
    env = services["airflow-worker"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "${AIRFLOW_EXECUTOR:-LocalExecutor}"
    assert env["AIRFLOW_CONN_CRASHSAFE_DEFAULT"].startswith("postgresql://")  # one shared store
    assert int(env["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"]) >= 86400
    watchdog = services["crashsafe-watchdog-celery"]
    command = watchdog["command"]
    assert command[command.index("--celery-broker-url") + 1] == env["AIRFLOW__CELERY__BROKER_URL"]
    assert "depends_on" not in watchdog
    assert command[command.index("--state-dir") + 1] == "/var/lib/crashsafe/celery"
    from airflow_crashsafe.watchdog.cli import add_arguments, settings

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(command[1:])
    args.config = None
    merged, _ = settings(args)
    assert (merged["celery_queues"], merged["worker_threshold"]) == ("default", 60.0)
