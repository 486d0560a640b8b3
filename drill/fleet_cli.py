"""The drill's ``--executor celery`` options, their checks, and the loop over the fleet's scenarios.

One fleet is booted for all the scenarios asked for; each gets its own day and its own report
(the LocalExecutor drill's side-by-side table, headed by the fault). ``--facts-json`` then holds
``{scenario: facts}`` (:func:`load_facts`). The exit code is the worst of the scenarios'.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from drill.facts import DrillFacts
from drill.fleet_scenarios import DEFAULT_SCENARIOS, FLEET_SCENARIOS, boot_fleet, new_scenario, run_scenario
from drill.hosts import unshare_available
from drill.redis_broker import find_redis_server
from drill.report import all_broken, render
from drill.scenario import Progress
from drill.session import DrillSession

__all__ = [
    "FLEET_SCENARIOS",
    "add_options",
    "check_args",
    "inconclusive",
    "load_facts",
    "run",
    "start_watchdog",
]

EXIT_OK, EXIT_BROKEN, EXIT_DRILL_FAILED = 0, 1, 3


def add_options(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--heartbeat-timeout",
        type=int,
        default=20,
        help="celery: [scheduler] task_instance_heartbeat_timeout, s (default 20; Airflow's is 300): a "
        "lost or partitioned worker's tasks are failed and retried elsewhere after it",
    )
    a(
        "--adoption-timeout",
        type=int,
        default=5,
        help="celery: [crashsafe] adoption_timeout_seconds (default 5): how long a re-run waits for "
        "the faulted host's in-flight unit before cancelling it and taking the slot over (a zombie "
        "still running then is fenced out)",
    )


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Celery needs the PostgreSQL metadata DB (two schedulers), root, unshare and redis-server."""
    if args.scenario == "wedge":
        parser.error("--scenario wedge runs on LocalExecutor: drop --executor celery")
    if args.metadata == "sqlite":
        parser.error("--executor celery needs --metadata postgres (two schedulers share the metadata DB)")
    args.metadata = "postgres"
    why = unshare_available()
    if why is not None:
        parser.error(f"--executor celery simulates each worker host with Linux namespaces: {why}")
    if find_redis_server() is None:
        parser.error("--executor celery needs redis-server: apt-get install redis-server")
    names = {"default": list(DEFAULT_SCENARIOS), "all": list(FLEET_SCENARIOS)}
    args.fleet_scenarios = names.get(args.scenario, [args.scenario])
    args.watch_threshold = int(args.watch_threshold or args.health_check_threshold)
    return args


def inconclusive(facts: DrillFacts) -> list[str]:
    """A host fault that hit no task of a side proved nothing about it."""
    fleet = facts.fleet
    if fleet is None or not fleet.host:
        return []
    return [
        f"{side}: no task ran on {fleet.host} when the fault hit"
        for side in ("plain", "crashsafe")
        if facts.dag(side) is not None and not fleet.faulted_tasks.get(side)
    ]


def run(
    drill: DrillSession,
    args: argparse.Namespace,
    progress: Progress,
    collect: Callable[[DrillSession, Progress], DrillFacts],
) -> int:
    """Boot the fleet, run each scenario, print each report; the worst exit code."""
    boot_fleet(drill, args, progress)
    components: dict = {}
    results: dict[str, DrillFacts] = {}
    rc = EXIT_OK
    for index, name in enumerate(args.fleet_scenarios):
        scenario = new_scenario(drill, args, index, components)
        if index == 0:
            scenario.boot()
            start_watchdog(drill, args)
        run_scenario(drill, args, name, scenario)
        facts = results[name] = collect(drill, progress)
        print(render(facts), flush=True)
        broken, unproved = all_broken(facts), inconclusive(facts)
        rc = max(rc, EXIT_BROKEN if broken else EXIT_DRILL_FAILED if unproved else EXIT_OK)
        if args.facts_json:
            args.facts_json.write_text(
                json.dumps({k: json.loads(v.to_json()) for k, v in results.items()}, indent=1)
            )
    return rc


def start_watchdog(drill: DrillSession, args: argparse.Namespace) -> None:
    """The watchdog beside the fleet (``--watch-interval 0``: none), reading the metadata DB's job
    table: it sees every scheduler replica without API credentials."""
    if args.watch_interval <= 0 or drill.cluster is None:
        return
    interval, threshold = f"{args.watch_interval:g}", str(args.watch_threshold)
    drill.start_watchdog(
        ["--interval", interval, "--threshold", threshold, "--db-url", drill.cluster.url("airflow")]
    )


def load_facts(path: Path) -> dict[str, DrillFacts]:
    """What ``--facts-json`` holds after a Celery drill: scenario -> facts."""
    raw = json.loads(path.read_text())
    return {name: DrillFacts.from_json(json.dumps(facts)) for name, facts in raw.items()}
