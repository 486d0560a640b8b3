"""The drill's command line: its options and defaults, without booting anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drill.cli import parse_args

REPO = Path(__file__).resolve().parents[3]


def test_defaults_are_a_full_night() -> None:
    """Without options: both DAGs, 7 regions, 2 payments, 150 s loads, a 40 s outage past a 30 s threshold."""
    args = parse_args([])
    assert (args.dags, args.regions, args.payments, args.work_seconds) == ("both", 7, 2, 150)
    assert (args.outage, args.health_check_threshold, args.watch_interval) == (40.0, 30, 10.0)


def test_watch_threshold_defaults_to_the_health_check_threshold() -> None:
    """The watchdog alerts at Airflow's own threshold unless told otherwise."""
    assert parse_args(["--health-check-threshold", "20"]).watch_threshold == 20
    assert parse_args(["--watch-threshold", "10"]).watch_threshold == 10


def test_python_m_drill_help_runs_from_the_checkout() -> None:
    """`python -m drill --help` (what ./dev drill runs) prints the options and the exit codes."""
    done = subprocess.run(
        [sys.executable, "-m", "drill", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--facts-json" in done.stdout
    assert "Exit codes: 0" in done.stdout


def test_the_storm_scenario_has_its_own_timings() -> None:
    """--scenario storm: 10 s outage past an 8 s threshold, 2 s polls, SQLite metadata, both variants."""
    args = parse_args(["--scenario", "storm"])
    assert (args.outage, args.health_check_threshold, args.watch_interval) == (10.0, 8, 2.0)
    assert (args.metadata, args.storm_variant) == ("sqlite", "both")
    assert parse_args(["--scenario", "storm", "--outage", "30"]).outage == 30.0
    assert parse_args(["--scenario", "storm", "--storm-variant", "lost"]).storm_variant == "lost"


def test_the_storm_refuses_an_outside_warehouse() -> None:
    """The storm builds its warehouse's capacity model itself: --warehouse-url is a one-line error."""
    done = subprocess.run(
        [sys.executable, "-m", "drill", "--scenario", "storm", "--warehouse-url", "postgresql://x/y"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--scenario storm builds its own warehouse" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_warehouse_is_postgres_unless_mariadb_is_asked_for() -> None:
    """--warehouse defaults to postgres; mariadb keeps the default scenario's timings."""
    assert parse_args([]).warehouse == "postgres"
    args = parse_args(["--warehouse", "mariadb", "--regions", "2"])
    assert (args.warehouse, args.scenario, args.executor, args.regions) == ("mariadb", "default", "local", 2)
    assert (args.outage, args.health_check_threshold, args.work_seconds) == (40.0, 30, 150)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "storm"], "--warehouse mariadb runs the default scenario on LocalExecutor only"),
        (["--scenario", "wedge"], "--warehouse mariadb runs the default scenario on LocalExecutor only"),
        (["--executor", "celery"], "--warehouse mariadb runs the default scenario on LocalExecutor only"),
        (["--warehouse-url", "postgresql://x/y"], "--warehouse-url names a PostgreSQL warehouse"),
    ],
)
def test_the_mariadb_warehouse_refuses_what_it_cannot_run(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--warehouse mariadb with another scenario, Celery or a PostgreSQL URL: a one-line usage error."""
    with pytest.raises(SystemExit) as done:
        parse_args(["--warehouse", "mariadb", *argv])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_an_unknown_warehouse_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--warehouse names one of the engines the drill can start."""
    with pytest.raises(SystemExit):
        parse_args(["--warehouse", "oracle"])
    assert "invalid choice: 'oracle'" in capsys.readouterr().err
