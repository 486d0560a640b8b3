"""``airflow-crashsafe drill``: the crash drill, from a fresh machine to a side-by-side report.

Exit codes: 0 every crashsafe invariant held; 1 one broke; 3 the drill itself could not run or
proved nothing (no load was interrupted). The plain DAG's damage is expected and only reported.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

from airflow_crashsafe.drill import facts as facts_mod
from airflow_crashsafe.drill.airflow_home import DrillHome, component_env, repo_root
from airflow_crashsafe.drill.components import Component, drill_processes, kill_drill_processes
from airflow_crashsafe.drill.report import broken_invariants, inconclusive, render
from airflow_crashsafe.drill.scenario import Progress, Scenario, ScenarioTimings
from airflow_crashsafe.drill.warehouse import (
    PostgresCluster,
    airflow_conn_uri,
    find_pg_bin,
    release_loads,
    sqlalchemy_url,
)

__all__ = ["EXIT_BROKEN", "EXIT_DRILL_FAILED", "EXIT_OK", "add_arguments", "run"]

EXIT_OK, EXIT_BROKEN, EXIT_DRILL_FAILED = 0, 1, 3
DAGS = {
    "plain": ("nightly_revenue_plain", "drill_plain"),
    "crashsafe": ("nightly_revenue_crashsafe", "drill_crashsafe"),
}
LONG_TASK_PREFIXES = ("load_revenue_", "append_lines_", "merge_revenue_", "overwrite_lines_")
COMMANDS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "db-migrate": ["db", "migrate"],
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The drill's options (the console script calls this on its ``drill`` subparser)."""
    parser.add_argument(
        "--warehouse-url", help="existing PostgreSQL warehouse (default: a throwaway cluster)"
    )
    parser.add_argument(
        "--metadata",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="Airflow metadata DB: embedded SQLite or the throwaway PostgreSQL cluster",
    )
    parser.add_argument("--dags", choices=["both", "plain", "crashsafe"], default="both")
    parser.add_argument(
        "--regions",
        type=int,
        default=7,
        help="regions per DAG; each has two parallel loads (default 7: 14 loads per DAG)",
    )
    parser.add_argument(
        "--work-seconds",
        type=int,
        default=300,
        help="longest a load works; the drill ends the work once the restarted scheduler re-ran it",
    )
    parser.add_argument(
        "--kill-after",
        type=float,
        default=10.0,
        help="seconds after all loads run before the scheduler is SIGKILLed",
    )
    parser.add_argument("--outage", type=float, default=40.0, help="seconds the scheduler stays down")
    parser.add_argument(
        "--health-check-threshold",
        type=int,
        default=30,
        help="[scheduler] scheduler_health_check_threshold (the outage must exceed it)",
    )
    parser.add_argument(
        "--logical-date",
        help="logical date of both runs (default 2024-01-01, or now "
        "with --warehouse-url so earlier drills' fences do not interfere)",
    )
    parser.add_argument("--workdir", help="parent of the temporary AIRFLOW_HOME (default: system temp)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME and logs")
    parser.add_argument("--facts-json", type=Path, help="also write the raw facts here (JSON)")


def _libpq(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(("postgresql", *parts[1:])) if parts.scheme.startswith("postgres") else url


def _crashsafe_available() -> bool:
    return (repo_root() / "airflow_crashsafe" / "operators" / "sql.py").exists()


class _Drill:
    """State shared between the phases and the cleanup."""

    def __init__(self, args: argparse.Namespace, progress: Progress) -> None:
        self.args = args
        self.progress = progress
        self.home = DrillHome.create(args.workdir)
        self.cluster: PostgresCluster | None = None
        self.sessions: set[int] = set()
        self.starts: dict[str, int] = {}
        self.notes: list[str] = []
        self.keys: list[str] = []
        self.warehouse_url = ""
        self.pg_outside: Path | None = None

    def warehouse(self) -> tuple[str, dict[str, str], str]:
        """(warehouse URL, connection env vars, metadata URL); starts the throwaway cluster if needed."""
        args, env = self.args, {}
        metadata = f"sqlite:///{self.home.metadata_sqlite}"
        pg_bin = find_pg_bin()
        if args.warehouse_url is None or args.metadata == "postgres":
            if pg_bin is None:
                raise RuntimeError(
                    "no PostgreSQL binaries found (set CRASHSAFE_PG_BIN or install postgresql); the "
                    "SQLite warehouse fallback is not supported yet: pass --warehouse-url postgresql://..."
                )
            # Run as root, the cluster runs as ``postgres``, which must reach its directory: the
            # drill's own tree may sit under a private parent (pytest's tmp dirs are 0700).
            pg_root = self.home.root / "pg"
            if os.geteuid() == 0:
                pg_root = Path(tempfile.mkdtemp(prefix="crashsafe-drill-pg-"))
                self.pg_outside = pg_root
            self.cluster = PostgresCluster(root=pg_root, bin_dir=pg_bin)
            self.cluster.start(["warehouse", "crashsafe_store", "airflow"], self.home.logs / "postgres.log")
            self.sessions.add(self.cluster.proc.pid if self.cluster.proc else -1)
            self.progress(f"throwaway PostgreSQL on 127.0.0.1:{self.cluster.port}")
            # Many task processes write to the crashsafe store at once: PostgreSQL, not SQLite.
            env["AIRFLOW_CONN_CRASHSAFE_DEFAULT"] = airflow_conn_uri(self.cluster.url("crashsafe_store"))
            if args.metadata == "postgres":
                metadata = sqlalchemy_url(self.cluster.url("airflow"))
        url = args.warehouse_url or (self.cluster.url("warehouse") if self.cluster else "")
        env["AIRFLOW_CONN_CRASHSAFE_WAREHOUSE"] = airflow_conn_uri(_libpq(url))
        return _libpq(url), env, metadata

    def component(self, name: str, env: dict[str, str]) -> Component:
        self.starts[name] = self.starts.get(name, 0) + 1
        suffix = "" if self.starts[name] == 1 else f"-{self.starts[name]}"
        airflow = str(Path(sys.executable).parent / "airflow")
        return Component(name, [airflow, *COMMANDS[name]], env, self.home.logs / f"{name}{suffix}.log")

    def cleanup(self, scenario: Scenario | None) -> int:
        """SIGKILL every process group started, then every straggler; returns how many are left."""
        for component in scenario.components.values() if scenario else []:
            component.kill_group()
        kill_drill_processes(self.sessions, self.home.airflow_home)
        if self.cluster is not None:
            self.cluster.stop()
        return len(drill_processes(self.sessions, self.home.airflow_home))


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Run the drill; see the module docstring for exit codes."""
    progress = Progress()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    drill = _Drill(args, progress)
    scenario: Scenario | None = None
    rc, failed = EXIT_DRILL_FAILED, True
    try:
        scenario = _run(drill, args, progress)
        facts = _collect(drill, scenario, args, progress)
        print(render(facts), flush=True)
        if args.facts_json:
            args.facts_json.write_text(facts.to_json())
        rc = EXIT_BROKEN if facts.crashsafe and broken_invariants(facts.crashsafe) else EXIT_OK
        if rc == EXIT_OK and inconclusive(facts):
            rc = EXIT_DRILL_FAILED
        failed = rc != EXIT_OK
    except KeyboardInterrupt:
        progress("interrupted")
    except Exception as exc:
        progress(f"drill failed: {type(exc).__name__}: {exc}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            left = drill.cleanup(scenario)
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


def _run(drill: _Drill, args: argparse.Namespace, progress: Progress) -> Scenario:
    keys = drill.keys = ["plain", "crashsafe"] if args.dags == "both" else [args.dags]
    if "crashsafe" in keys and not _crashsafe_available():
        keys.remove("crashsafe")
        drill.notes.append("crashsafe operators not installed yet: ran the plain DAG only")
        progress("NOTICE: airflow_crashsafe.operators.sql is missing; running the plain DAG alone")
    if not keys:
        raise RuntimeError("no DAG to run")
    dags_dir = drill.home.airflow_home / "dags"
    dags_dir.mkdir()
    for key in keys:
        shutil.copy(repo_root() / "dags_examples" / f"{DAGS[key][0]}.py", dags_dir)
    warehouse_url, conn_env, metadata_url = drill.warehouse()
    drill.warehouse_url = warehouse_url
    extra = {**conn_env, "CRASHSAFE_DRILL_REGIONS": str(args.regions)}
    env = component_env(
        drill.home,
        dags_folder=dags_dir,
        metadata_url=metadata_url,
        extra=extra,
        health_check_threshold=args.health_check_threshold,
    )
    progress(
        f"AIRFLOW_HOME {drill.home.airflow_home}; migrating the metadata DB ({metadata_url.split(':')[0]})"
    )
    migrate = drill.component("db-migrate", env)
    migrate.start()
    drill.sessions.add(migrate.pid or -1)
    if migrate.proc is None or migrate.proc.wait(timeout=300) != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{migrate.tail()}")
    timings = ScenarioTimings(
        work_seconds=args.work_seconds,
        kill_after=args.kill_after,
        outage=args.outage,
        health_check_threshold=args.health_check_threshold,
    )
    scenario = Scenario(
        home=drill.home,
        dag_ids=[DAGS[k][0] for k in keys],
        long_task_prefixes=LONG_TASK_PREFIXES,
        logical_date=_logical_date(args),
        timings=timings,
        make_component=lambda name: drill.component(name, env),
        progress=progress,
        on_start=lambda c: drill.sessions.add(c.pid or -1),
    )
    scenario.boot()
    scenario.trigger({"work_seconds": args.work_seconds})
    scenario.wait_running(expected=2 * args.regions * len(keys))
    scenario.crash_and_restart()
    day = scenario.logical_date[:10]
    schemas = [DAGS[k][1] for k in keys]
    scenario.wait_reset(release=lambda: release_loads(drill.warehouse_url, schemas, day))
    scenario.wait_finished()
    return scenario


def _logical_date(args: argparse.Namespace) -> str:
    if args.logical_date:
        return str(args.logical_date)
    if args.warehouse_url:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "2024-01-01T00:00:00Z"


def _collect(
    drill: _Drill, scenario: Scenario, args: argparse.Namespace, progress: Progress
) -> facts_mod.DrillFacts:
    day = scenario.logical_date[:10]
    sides: dict[str, facts_mod.DagFacts | None] = {"plain": None, "crashsafe": None}
    for key in drill.keys:
        dag_id, schema = DAGS[key]
        sides[key] = facts_mod.collect_dag_facts(
            scenario.api,
            dag_id=dag_id,
            run_id=scenario.run_ids[dag_id],
            logs_dir=drill.home.task_logs,
            warehouse_url=drill.warehouse_url,
            schema=schema,
            day=day,
            long_task_prefixes=list(LONG_TASK_PREFIXES),
            fenced=key == "crashsafe",
        )
    progress("report")
    return facts_mod.DrillFacts(
        plain=sides["plain"],
        crashsafe=sides["crashsafe"],
        crashed_at=scenario.crashed_at,
        restarted_at=scenario.restarted_at,
        wall_seconds=progress.elapsed(),
        notes=drill.notes,
        sessions=sorted(drill.sessions),
    )
