"""One drill's resources — home, warehouse, components, vendors, watchdog — and their cleanup.

Everything the drill starts is recorded here as it starts, so that ``cleanup()`` (run in the
CLI's ``finally``) can SIGKILL every process group and stop every in-process server, whatever
phase failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from airflow_crashsafe.drill.airflow_home import DrillHome
from airflow_crashsafe.drill.components import Component, drill_processes, kill_drill_processes
from airflow_crashsafe.drill.scenario import Progress, Scenario
from airflow_crashsafe.drill.vendors import DrillVendors
from airflow_crashsafe.drill.warehouse import PostgresCluster, airflow_conn_uri, find_pg_bin, sqlalchemy_url
from airflow_crashsafe.drill.watch import WatchdogProcess, WebhookReceiver
from airflow_crashsafe.drill.work_meter import MeterResult, WorkMeter

__all__ = ["COMMANDS", "DrillSession"]

COMMANDS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    # Deferred tasks wait here: a crashsafe re-run waiting to adopt its predecessor's unit.
    "triggerer": ["triggerer", "--skip-serve-logs"],
    "db-migrate": ["db", "migrate"],
}


def _libpq(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(("postgresql", *parts[1:])) if parts.scheme.startswith("postgres") else url


class DrillSession:
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
        self.store_url = ""
        self.vendors: DrillVendors | None = None
        self.receiver: WebhookReceiver | None = None
        self.watchdog: WatchdogProcess | None = None
        self.meter: WorkMeter | None = None
        self.work: MeterResult | None = None

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
            self.store_url = self.cluster.url("crashsafe_store")
            env["AIRFLOW_CONN_CRASHSAFE_DEFAULT"] = airflow_conn_uri(self.store_url)
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
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.meter is not None:
            self.meter.stop()
        for component in scenario.components.values() if scenario else []:
            component.kill_group()
        kill_drill_processes(self.sessions, self.home.airflow_home)
        if self.cluster is not None:
            self.cluster.stop()
        if self.vendors is not None:
            self.vendors.stop()
        if self.receiver is not None:
            self.receiver.close()
        return len(drill_processes(self.sessions, self.home.airflow_home))
