"""The deployment files: docker-compose.yaml, Dockerfile and the watchdog's config (validated offline)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import tomllib
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
    api_state = _watch_toml()["watch"]["state_dir"]
    db_state = command[command.index("--state-dir") + 1]
    assert not _under(db_state, api_state), "never the API watchdog's directory"
    assert not _under(api_state, db_state)


# -- what makes the compose deployment page: state it can write, every service configured --------

#: The uid of the base image's ``airflow`` user.
AIRFLOW_UID = "50000"
INTERPOLATION = re.compile(r"(?<!\$)\$\{(\w+)(:?[-?])?([^}]*)\}")  # $${X} is the container's


def _watch_toml() -> dict[str, Any]:
    return tomllib.loads((REPO / "deploy" / "watch.toml").read_text())


def _under(path: str, root: str) -> bool:
    return PurePosixPath(path) == PurePosixPath(root) or PurePosixPath(root) in PurePosixPath(path).parents


def _dockerfile() -> tuple[str, set[str]]:
    """The image's final USER, and the directories a RUN running as root creates and hands to it."""
    user, owned = "airflow", set()  # apache/airflow's images run as airflow (uid 50000)
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["USER"]:
            user = words[1]
        elif words[:1] == ["RUN"] and user == "root":
            commands = " ".join(words[1:]).split("&&")
            made = {w for c in commands if c.split()[:2] == ["mkdir", "-p"] for w in c.split()[2:]}
            for command in commands:
                parts = command.split()
                if parts[:2] == ["chown", "-R"] and parts[2].split(":")[0] in (AIRFLOW_UID, "airflow"):
                    owned |= {d for d in parts[3:] if any(_under(m, d) for m in made)}
                    owned |= {m for m in made if any(_under(m, d) for d in parts[3:])}
    return user, owned


def _named_volume_mounts(service: dict[str, Any], compose: dict[str, Any]) -> dict[str, str]:
    """``{target: volume}`` for the service's named volumes (bind mounts like ./deploy excluded)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source in compose["volumes"]:
            mounts[target] = source
    return mounts


def _built_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose["services"].items() if s.get("build") == "."}


def _state_paths(name: str, service: dict[str, Any]) -> list[str]:
    """Where the service writes state: the watchdogs' state dirs, the alerting DAG's."""
    command = service.get("command") or []
    if isinstance(command, list) and command[:1] == ["watch"]:
        given = command[command.index("--state-dir") + 1] if "--state-dir" in command else None
        return [given or _watch_toml()["watch"]["state_dir"]]
    alerting = (service.get("environment") or {}).get("AIRFLOW__CRASHSAFE__ALERTING_STATE_DIR")
    return [alerting] if alerting else []


def test_image_runs_as_airflow_and_owns_every_named_volume(compose: dict[str, Any]) -> None:
    """Each named volume of the image's services mounts on a directory the image creates for uid 50000."""
    user, owned = _dockerfile()
    assert user in ("airflow", AIRFLOW_UID), f"the image's last USER is {user!r}"
    assert owned, "the Dockerfile creates and chowns no directory: the check would pass vacuously"
    for name, service in _built_services(compose).items():
        assert service.get("user", user) in ("airflow", AIRFLOW_UID, f"{AIRFLOW_UID}:0"), name
        for target, volume in _named_volume_mounts(service, compose).items():
            if target == "/opt/airflow/logs":
                continue  # the base image's own directory, owned by airflow already
            assert any(_under(target, d) for d in owned), (
                f"{name}: volume {volume} on {target}: Docker would create it as root; "
                "mkdir and chown it to 50000 in the Dockerfile"
            )


@pytest.mark.parametrize("name", ["crashsafe-watchdog", "crashsafe-watchdog-db", "airflow-scheduler"])
def test_state_paths_are_on_a_volume_the_image_user_owns(compose: dict[str, Any], name: str) -> None:
    """The watchdogs' and the alerting DAG's state dirs are on a named volume, in a dir uid 50000 owns."""
    _, owned = _dockerfile()
    service = compose["services"][name]
    paths = _state_paths(name, service)
    assert paths, f"{name} writes no state? (no --state-dir, state_dir or ALERTING_STATE_DIR found)"
    mounts = _named_volume_mounts(service, compose)
    for path in paths:
        assert any(_under(path, target) for target in mounts), (
            f"{name}: {path} is on no volume (lost on restart)"
        )
        assert any(_under(path, d) for d in owned), (
            f"{name}: {path} is not created for uid 50000 in the image"
        )


def test_every_long_running_service_has_a_health_check(compose: dict[str, Any]) -> None:
    """Every service but the one-shot airflow-init has a health check; the scheduler's probes port 8974."""
    for name, service in compose["services"].items():
        if service.get("restart") == "no":
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
    scheduler = compose["services"]["airflow-scheduler"]
    assert compose["x-airflow-common"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"
    assert "http://localhost:8974/health" in scheduler["healthcheck"]["test"]


def _required(value: str) -> str:
    """The .env variable a ``${VAR:?message}`` value requires."""
    match = INTERPOLATION.fullmatch(value.strip())
    assert match, f"{value!r}: require it with ${{VAR:?message}}"
    assert match.group(2) == ":?", f"{value!r}: require it with ${{VAR:?message}}"
    return match.group(1)


def test_watchdogs_get_every_secret_their_config_names(compose: dict[str, Any]) -> None:
    """Each *_env variable deploy/watch.toml names is required from .env in both watchdog services."""
    config = _watch_toml()
    named = {v for k, v in config["watch"].items() if k.endswith("_env")}
    named |= {v for sink in config["sinks"] for k, v in sink.items() if k.endswith("_env")}
    assert "CRASHSAFE_API_PASSWORD" in named  # the canary reads DAG runs through the REST API
    for name in ("crashsafe-watchdog", "crashsafe-watchdog-db"):
        environment = compose["services"][name]["environment"]
        for variable in named:
            assert variable in environment, f"{name} lacks {variable}"
            assert _required(environment[variable]) == variable


def test_canary_and_alerting_dag_can_log_in(compose: dict[str, Any]) -> None:
    """The watchdog's API user and crashsafe_api's login are one viewer user whose password init writes."""
    environment = compose["x-airflow-common"]["environment"]
    users = dict(u.split(":")[:2] for u in environment["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"].split(","))
    watch = _watch_toml()["watch"]
    assert users[watch["api_user"]] == "viewer"
    assert "admin" in users.values(), "no login user for people"

    connection = json.loads(INTERPOLATION.sub("pw", environment["AIRFLOW_CONN_CRASHSAFE_API"]))
    assert connection["login"] == watch["api_user"]
    assert connection["conn_type"] == "http"
    assert connection["host"] in compose["services"]
    assert f"http://{connection['host']}:{connection['port']}" == watch["api_url"]
    password = INTERPOLATION.search(environment["AIRFLOW_CONN_CRASHSAFE_API"])
    assert password is not None
    assert password.group(1) == watch["api_password_env"]

    init = compose["services"]["airflow-init"]
    script = " ".join(init["command"])
    assert (
        environment["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]
        in [v for t, v in (m.split(":")[1::-1] for m in init["volumes"] if ":" in m)]
        or "SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in script
    )
    for user in users:
        assert f'"{user}": os.environ[' in script, f"airflow-init writes no password for {user}"
    assert _required(init["environment"][watch["api_password_env"]]) == watch["api_password_env"]


def test_canary_dag_exists_and_pings_the_dead_mans_switch(compose: dict[str, Any]) -> None:
    """The canary the watchdog expects is a mounted example DAG, and its dead man's switch URL is required."""
    canary = _watch_toml()["watch"]["canary_dag_id"]
    assert (REPO / "dags_examples" / f"{canary}.py").is_file()
    environment = compose["x-airflow-common"]["environment"]
    assert (
        _required(environment["AIRFLOW__CRASHSAFE__DEAD_MANS_SWITCH_URL"]) == "CRASHSAFE_DEAD_MANS_SWITCH_URL"
    )


def test_env_example_lists_every_variable_compose_reads(compose: dict[str, Any]) -> None:
    """.env.example has a line for each ${VAR} docker-compose.yaml interpolates, and nothing else."""
    used = set(INTERPOLATION.findall(json.dumps(compose)))  # the loaded file: comments left out
    listed = {
        line.split("=", 1)[0]
        for line in (REPO / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert {name for name, _, _ in used} == listed


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
