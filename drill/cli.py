"""``python -m drill`` (``./dev drill``): the crash drill, from a fresh machine to a side-by-side report.

Boots real Airflow with the two DAGs of :mod:`drill.dags`, SIGKILLs the scheduler while every
load and payment push runs, restarts it late (:mod:`drill.scenario`), then has each capability
of :data:`drill.report.CAPABILITIES` collect its facts and prints the report. ``--scenario wedge``
instead kills the scheduler inside its critical section and shows its successor wedged, then
healed by the watchdog (:mod:`drill.wedge`, reported by :mod:`drill.wedge_report`). ``--scenario
storm`` reproduces the restart's burst against a finite warehouse and a deadline, plain beside
crashsafe, with ``--storm-variant`` choosing whether the in-flight work survives the crash
(:mod:`drill.storm`, reported by :mod:`drill.storm_report`). ``--warehouse mariadb`` runs the
default scenario with the warehouse on a throwaway MariaDB server (the DAGs' SQL in its spelling).

Exit codes: 0 every crashsafe invariant held; 1 one broke; 3 the drill itself could not run or
proved nothing (no load was interrupted). The plain DAG's damage is expected and only reported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from drill import dags, fleet_cli, storm, storm_report, wedge, wedge_report
from drill.airflow_home import component_env, repo_root
from drill.components import wait_until
from drill.facts import DrillFacts
from drill.report import CAPABILITIES, all_broken, inconclusive, render
from drill.scenario import Progress
from drill.session import DrillSession
from drill.vendors import VENDOR_NAMES, DrillVendors
from drill.work_meter import WorkMeter
from drill.writes import MARIADB_NOTES

__all__ = [
    "EXIT_BROKEN",
    "EXIT_DRILL_FAILED",
    "EXIT_OK",
    "SCENARIOS",
    "build_parser",
    "main",
    "parse_args",
    "run",
]

EXIT_OK, EXIT_BROKEN, EXIT_DRILL_FAILED = 0, 1, 3
#: ``--scenario`` choices: the crash of :mod:`drill.scenario`, the wedge of :mod:`drill.wedge`,
#: the storm of :mod:`drill.storm`, and with ``--executor celery`` the fleet's faults of
#: :mod:`drill.fleet_scenarios` (``all``: every one).
SCENARIOS = ("default", "wedge", "storm", *fleet_cli.FLEET_SCENARIOS, "all")
#: ``--storm-variant`` choices (see :data:`drill.storm_report.VARIANT_TITLES`).
STORM_VARIANTS = ("both", "adopt", "lost")
#: ``--warehouse`` choices: the engine the drill's loads write to.
WAREHOUSES = ("postgres", "mariadb")
#: Per scenario, the defaults of ``--outage`` and ``--health-check-threshold``.
OUTAGE_DEFAULTS = {"default": (40.0, 30), "wedge": (40.0, 30), "storm": (10.0, 8)}
#: Per scenario, the default of ``--watch-interval``: the storm's night is short.
WATCH_INTERVALS = {"default": 10.0, "wedge": 10.0, "storm": 2.0}

#: The numeric options: flag, type, default, help.
NUMBERS: list[tuple[str, type[int] | type[float], float | None, str]] = [
    ("--regions", int, 7, "regions per DAG; each has two parallel loads (default 7)"),
    (
        "--payments",
        int,
        2,
        "payments pushed per vendor and DAG while the loads run (default 2; 0: no vendor push)",
    ),
    (
        "--work-seconds",
        int,
        None,
        "how long each load works in the warehouse (default 150: it must outlive the outage "
        "and the restarted scheduler's re-run start-up, so that the re-runs find it in flight; "
        "celery: per scenario, 45-90)",
    ),
    ("--kill-after", float, 10.0, "seconds after all loads run before the SIGKILL"),
    ("--outage", float, None, "seconds the scheduler stays down (default 40; storm 10)"),
    (
        "--health-check-threshold",
        int,
        None,
        "[scheduler] scheduler_health_check_threshold (the outage must exceed it; default 30, storm 8)",
    ),
    (
        "--watch-threshold",
        int,
        None,
        "heartbeat age, s, at which the watchdog alerts (default: --health-check-threshold)",
    ),
    (
        "--watch-interval",
        float,
        None,
        "the watchdog's poll interval, s (default 10, its own default; storm 2; 0: no watchdog)",
    ),
    ("--wedge-tasks", int, 20, "wedge: parallel tasks running when the scheduler is killed (default 20)"),
    (
        "--give-up",
        float,
        120.0,
        "wedge: seconds the plain phase waits for the restarted scheduler to queue the reset tasks, "
        "and the crashsafe phase (at least 60) for the healing watchdog's page and recovery",
    ),
    (
        "--kill-timeout",
        float,
        300.0,
        "wedge: seconds to try landing the SIGKILL inside the scheduler's critical section",
    ),
    ("--storm-loads", int, 6, "storm: loads per DAG (default 6)"),
    ("--storm-capacity", int, 2, "storm: C, loads the warehouse serves at full speed (default 2)"),
    ("--storm-steps", int, 16, "storm: steps of work per load (default 16)"),
    ("--storm-step-seconds", float, 1.0, "storm: seconds per step at or below C (default 1)"),
    (
        "--storm-interval",
        float,
        12.0,
        "storm: seconds between two sources landing (default 12: steps x step-seconds / interval = "
        "1.3 loads at a time, the steady rate, under C)",
    ),
    ("--storm-timeout", float, 20.0, "storm: the loader's statement_timeout, s (default 20)"),
    ("--storm-retries", int, 3, "storm: Airflow retries per load (default 3)"),
    ("--storm-retry-delay", float, 5.0, "storm: Airflow retry_delay, s (default 5)"),
    ("--storm-budget", int, 2, "storm: crashsafe recovery_concurrency per warehouse (default 2)"),
    (
        "--storm-crash-at",
        float,
        14.0,
        "storm: seconds into the night the scheduler is SIGKILLed (default 14)",
    ),
    (
        "--storm-deadline",
        float,
        190.0,
        "storm: seconds from the first source to the deadline, 06:00 (default 190)",
    ),
    ("--storm-grace", float, 60.0, "storm: seconds past the deadline to wait for late runs (default 60)"),
]


def build_parser() -> argparse.ArgumentParser:
    """The drill's options."""
    parser = argparse.ArgumentParser(
        prog="python -m drill",
        description="The crash drill: boot real Airflow, SIGKILL the scheduler mid-run, restart it "
        "late, and report what plain Airflow and crashsafe each got wrong.",
        epilog="Exit codes: 0 every crashsafe invariant held; 1 one broke; 3 the drill could not run "
        "or proved nothing.",
    )
    a = parser.add_argument
    a(
        "--scenario",
        choices=SCENARIOS,
        default="default",
        help="default: the crash while loads and payments run (celery: lost-worker and partition); "
        "wedge: SIGKILL the scheduler inside its critical section, show its successor wedged, then "
        "healed by `watch --heal` "
        "(needs --metadata postgres, chosen by default); storm: the restart's burst of re-runs on a "
        "warehouse of finite capacity, statement timeouts, retries and a deadline, plain beside "
        "crashsafe (see --storm-variant); with --executor celery: one-scheduler (a), schedulers-down "
        "(b), lost-worker (c), partition (d), redelivery (e), or all",
    )
    a(
        "--storm-variant",
        choices=STORM_VARIANTS,
        default="both",
        help="storm: adopt = the crash spares the running loads (adoption can help); lost = the crash "
        "kills their workers and warehouse backends, so every re-run redoes its work and recovery "
        "admission alone damps the burst; both (default) = both variants side by side in one Airflow",
    )
    a(
        "--executor",
        choices=["local", "celery"],
        default="local",
        help="local: LocalExecutor on this machine (default); celery: a Celery fleet of two worker "
        "hosts (own UTS and PID namespaces; needs root, unshare and redis-server), two schedulers",
    )
    fleet_cli.add_options(parser)
    a(
        "--warehouse",
        choices=WAREHOUSES,
        default="postgres",
        help="the engine of the warehouse the loads fence and MERGE into: postgres (default: the "
        "throwaway cluster) or mariadb (a throwaway MariaDB server; fencing without adoption and no "
        "work meter there, the report says why); the crashsafe store stays on PostgreSQL",
    )
    a("--warehouse-url", help="existing PostgreSQL warehouse (default: a throwaway cluster)")
    a(
        "--metadata",
        choices=["sqlite", "postgres"],
        help="Airflow metadata DB: embedded SQLite or the throwaway PostgreSQL cluster (default "
        "sqlite; postgres for --scenario wedge)",
    )
    a("--dags", choices=["both", "plain", "crashsafe"], default="both")
    for flag, kind, default, text in NUMBERS:
        a(flag, type=kind, default=default, help=text)
    a(
        "--logical-date",
        help="logical date of both runs (default 2024-01-01, or now "
        "with --warehouse-url so earlier drills' fences do not interfere)",
    )
    a("--workdir", help="parent of the temporary AIRFLOW_HOME (default: system temp)")
    a("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME and logs")
    a("--facts-json", type=Path, help="also write the raw facts here (JSON)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the options; the watchdog's threshold defaults to Airflow's health-check threshold.

    The wedge is a PostgreSQL session's locks: ``--scenario wedge`` runs on the PostgreSQL metadata
    DB and refuses ``--metadata sqlite``.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.warehouse == "mariadb":
        if args.executor == "celery" or args.scenario != "default":
            parser.error("--warehouse mariadb runs the default scenario on LocalExecutor only")
        if args.warehouse_url:
            parser.error("--warehouse-url names a PostgreSQL warehouse: drop it with --warehouse mariadb")
    if args.executor == "celery":
        if args.scenario == "storm":
            parser.error("--scenario storm runs on LocalExecutor: drop --executor celery")
        _scenario_defaults(args, "default")
        return fleet_cli.check_args(parser, args)
    if args.scenario in (*fleet_cli.FLEET_SCENARIOS, "all"):
        parser.error(f"--scenario {args.scenario} is a fleet scenario: add --executor celery")
    args.work_seconds = args.work_seconds or 150
    if args.scenario == "wedge" and args.metadata == "sqlite":
        parser.error("--scenario wedge needs --metadata postgres (the wedge is a PostgreSQL session's locks)")
    if args.scenario == "storm" and args.warehouse_url:
        parser.error("--scenario storm builds its own warehouse: drop --warehouse-url")
    args.metadata = args.metadata or ("postgres" if args.scenario == "wedge" else "sqlite")
    _scenario_defaults(args, args.scenario)
    args.watch_threshold = int(args.watch_threshold or args.health_check_threshold)
    return args


def _scenario_defaults(args: argparse.Namespace, scenario: str) -> None:
    """``--watch-interval``, ``--outage`` and ``--health-check-threshold`` not given: the scenario's."""
    if args.watch_interval is None:
        args.watch_interval = WATCH_INTERVALS[scenario]
    outage, threshold = OUTAGE_DEFAULTS[scenario]
    args.outage = outage if args.outage is None else args.outage
    if args.health_check_threshold is None:
        args.health_check_threshold = threshold


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m drill [options]``; returns the exit code (see the module docstring)."""
    return run(parse_args(argv))


def _crashsafe_available() -> bool:
    return (repo_root() / "airflow_crashsafe" / "operators" / "sql.py").exists()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Run the drill; see the module docstring for exit codes."""
    progress = Progress()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    drill = DrillSession(args, progress)
    rc, failed = EXIT_DRILL_FAILED, True
    try:
        if args.executor == "celery":
            rc = fleet_cli.run(drill, args, progress, _collect)
        else:
            if args.scenario == "storm":
                found = storm.run(drill, args, progress)
                text, broken = storm_report.render(found), storm_report.invariants(found)
                unproved = storm_report.inconclusive(found)
                facts_json = json.dumps(asdict(found), indent=1)
            elif args.scenario == "wedge":
                facts = wedge.run(drill, args, progress)
                text, broken = wedge_report.render(facts), wedge_report.invariants(facts)
                unproved = wedge_report.inconclusive(facts)
            else:
                _crash(drill, args, progress)
                facts = _collect(drill, progress)
                text, broken, unproved = render(facts), all_broken(facts), inconclusive(facts)
            if args.scenario != "storm":
                facts_json = facts.to_json()
            print(text, flush=True)
            if args.facts_json:
                args.facts_json.write_text(facts_json)
            rc = EXIT_BROKEN if broken else EXIT_DRILL_FAILED if unproved else EXIT_OK
        failed = rc != EXIT_OK
    except KeyboardInterrupt:
        progress("interrupted")
    except Exception as exc:
        progress(f"drill failed: {type(exc).__name__}: {exc}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            left = drill.cleanup()
            progress(
                f"cleanup done: {left} drill processes left" if left else "cleanup done: no process left"
            )
            if left:
                rc = max(rc, EXIT_DRILL_FAILED)
            if args.keep or failed:
                progress(
                    f"AIRFLOW_HOME and logs kept in {drill.home.root} (component logs: {drill.home.logs})"
                    + (f"; PostgreSQL data in {drill.pg_outside}" if drill.pg_outside else "")
                )
            else:
                drill.home.remove()
                if drill.pg_outside is not None:
                    shutil.rmtree(drill.pg_outside, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)
    return rc


def _crash(drill: DrillSession, args: argparse.Namespace, progress: Progress) -> None:
    """Boot Airflow with the DAGs, the vendors, the watchdog and the meter; crash; wait for the end."""
    keys = drill.keys = ["plain", "crashsafe"] if args.dags == "both" else [args.dags]
    if "crashsafe" in keys and not _crashsafe_available():
        keys.remove("crashsafe")
        drill.notes.append("crashsafe operators not installed yet: ran the plain DAG only")
        progress("NOTICE: airflow_crashsafe.operators.sql is missing; running the plain DAG alone")
    if not keys:
        raise RuntimeError("no DAG to run")
    dags_dir = drill.home.airflow_home / "dags"
    dags.install(keys, dags_dir)
    warehouse_url, conn_env, metadata_url = drill.warehouse()
    drill.warehouse_url = warehouse_url
    vendors = drill.vendors = DrillVendors.start()
    progress(f"vendors listening: naive {vendors.naive.url}, key-honouring {vendors.keyed.url}")
    extra = {
        **conn_env,
        **vendors.env(),
        "CRASHSAFE_DRILL_REGIONS": str(args.regions),
        "CRASHSAFE_DRILL_PAYMENTS": str(args.payments),
    }
    pushes = len(VENDOR_NAMES) * args.payments
    running = (2 * args.regions + pushes) * len(keys)
    env = component_env(
        drill.home,
        dags_folder=dags_dir,
        metadata_url=metadata_url,
        extra=extra,
        health_check_threshold=args.health_check_threshold,
        parallelism=max(32, running + 4),  # every long task must run at once to be caught by the crash
    )
    progress(
        f"AIRFLOW_HOME {drill.home.airflow_home}; migrating the metadata DB ({metadata_url.split(':')[0]})"
    )
    drill.migrate(env)
    scenario = drill.new_scenario(
        env,
        dag_ids=list(dags.dag_ids(keys).values()),
        long_task_prefixes=(*dags.LONG_TASK_PREFIXES, dags.PUSH_PREFIX),
        logical_date=_logical_date(args),
        kill_after=args.kill_after,
    )
    scenario.boot()
    if args.watch_interval > 0:
        drill.start_watchdog(
            ["--interval", str(args.watch_interval), "--threshold", str(args.watch_threshold)]
        )
    if drill.warehouse_url.startswith("postgres"):
        # Counts, server-side, every execution of every load (abandoned attempts' included).
        drill.meter = WorkMeter(drill.warehouse_url).start()
    else:
        drill.notes += MARIADB_NOTES
    scenario.trigger({"work_seconds": args.work_seconds})
    scenario.wait_running(expected=running)

    def in_flight() -> bool:
        return all(vendors.received_from(dag_id) >= pushes for dag_id in scenario.dag_ids)

    what = "every payment push to reach its vendor"
    wait_until(what, in_flight, 120, tick=progress.waiting(what))
    if pushes:
        progress(f"{pushes * len(keys)} payment pushes in flight (the vendors hold them)")
    scenario.crash_and_restart()
    scenario.wait_reset(release=vendors.release.set)
    scenario.wait_finished()
    if drill.meter is not None:
        drill.work = drill.meter.stop()


def _logical_date(args: argparse.Namespace) -> str:
    if args.logical_date:
        return str(args.logical_date)
    if args.warehouse_url:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "2024-01-01T00:00:00Z"


def _collect(drill: DrillSession, progress: Progress) -> DrillFacts:
    """Each capability reads back what happened, in :data:`~drill.report.CAPABILITIES` order."""
    scenario = drill.ran()
    facts = DrillFacts(None, None, crashed_at=scenario.crashed_at, restarted_at=scenario.restarted_at)
    for capability in CAPABILITIES:
        capability.collect(drill, facts)
    progress("report")
    facts.wall_seconds = progress.elapsed()
    facts.notes = drill.notes
    facts.warehouse = getattr(drill.args, "warehouse", "postgres")
    facts.sessions = sorted(drill.sessions)
    return facts
