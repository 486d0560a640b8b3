"""The drill's command line: its options and defaults, without booting anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
