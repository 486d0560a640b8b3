"""One drill's resources — home, warehouse, components, vendors, watchdog, meter — and their cleanup.

Everything the drill starts is recorded here as it starts, so that ``cleanup()`` (run in the
CLI's ``finally``) can SIGKILL every process group and stop every in-process server, whatever
phase failed. After the crash, the capabilities collect their facts from it (:mod:`drill.capability`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from airflow_crashsafe.testing.mariadb import MariaDbServer, make_database, start_server
from drill.airflow_home import DrillHome
from drill.cluster import PostgresCluster, airflow_conn_uri, find_pg_bin, libpq_url, sqlalchemy_url
from drill.components import Component, airflow_component, drill_processes, kill_drill_processes
from drill.fleet import Fleet
from drill.fleet_report import FleetFact
from drill.scenario import Progress, Scenario, ScenarioTimings
from drill.vendors import DrillVendors
from drill.watch import WatchdogProcess, WebhookReceiver
from drill.work_meter import MeterResult, WorkMeter

__all__ = ["DrillSession"]


class DrillSession:
    """State shared between the phases and the cleanup."""

    def __init__(self, args: argparse.Namespace, progress: Progress) -> None:
        self.args = args
        self.progress = progress
        self.home = DrillHome.create(args.workdir)
        self.cluster: PostgresCluster | None = None
        #: The throwaway MariaDB server holding the warehouse (``--warehouse mariadb``).
        self.mariadb: MariaDbServer | None = None
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
        self.scenario: Scenario | None = None
        #: The Celery fleet (``--executor celery``) and the running fleet scenario's record.
        self.fleet: Fleet | None = None
        self.fleet_fact: FleetFact | None = None

    def ran(self) -> Scenario:
        """The crash scenario, once it started (the capabilities collect from it after the runs)."""
        if self.scenario is None:
            raise RuntimeError("the crash scenario has not run")
        return self.scenario

    def new_scenario(
        self,
        env: dict[str, str],
        *,
        dag_ids: list[str],
        long_task_prefixes: tuple[str, ...],
        logical_date: str,
        kill_after: float = 10.0,
    ) -> Scenario:
        """The scenario of this drill, its components started with ``env`` and recorded for cleanup."""
        args = self.args
        self.scenario = Scenario(
            home=self.home,
            dag_ids=dag_ids,
            long_task_prefixes=long_task_prefixes,
            logical_date=logical_date,
            timings=ScenarioTimings(
                work_seconds=args.work_seconds,
                kill_after=kill_after,
                outage=args.outage,
                health_check_threshold=args.health_check_threshold,
                finish_timeout=self._finish_timeout(),
            ),
            make_component=lambda name: self.component(name, env),
            progress=self.progress,
            on_start=lambda c: self.sessions.add(c.pid or -1),
        )
        return self.scenario

    def _finish_timeout(self) -> float | None:
        """MariaDB adopts nothing: every reset load is redone, ``recovery_concurrency`` at a time."""
        args = self.args
        if getattr(args, "warehouse", "postgres") != "mariadb":
            return None
        from airflow_crashsafe.options import OPTIONS  # the drill leaves the option at its default

        places = int(str(OPTIONS["recovery_concurrency"]["default"])) or 2 * args.regions
        waves = -(-2 * args.regions // places)
        return float(args.work_seconds * (waves + 3) + 180)

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
        if getattr(args, "warehouse", "postgres") == "mariadb":
            url = self._mariadb_warehouse()
            env["AIRFLOW_CONN_CRASHSAFE_WAREHOUSE"] = url
            env["CRASHSAFE_DRILL_WAREHOUSE"] = "mariadb"  # the DAGs' SQL in MariaDB's spelling
            return url, env, metadata
        url = args.warehouse_url or (self.cluster.url("warehouse") if self.cluster else "")
        env["AIRFLOW_CONN_CRASHSAFE_WAREHOUSE"] = airflow_conn_uri(libpq_url(url))
        return libpq_url(url), env, metadata

    def _mariadb_warehouse(self) -> str:
        """Start the throwaway MariaDB server; the URL of a new database in it (the store stays put)."""
        self.mariadb = start_server()  # stopped by cleanup(); its reaper stops it if the drill dies
        self.progress(f"throwaway MariaDB (warehouse) on 127.0.0.1:{self.mariadb.port}")
        return make_database(self.mariadb.admin_url, prefix="warehouse")

    def component(self, name: str, env: dict[str, str]) -> Component:
        return airflow_component(name, env, self.home.logs, self.starts)

    def migrate(self, env: dict[str, str]) -> None:
        """``airflow db migrate`` with the components' environment."""
        migrate = self.component("db-migrate", env)
        migrate.start()
        self.sessions.add(migrate.pid or -1)
        migrate.wait_success(timeout=300)

    def start_watchdog(
        self, options: list[str], config: dict[str, Any] | None = None, token: str | None = None
    ) -> None:
        """The watchdog beside Airflow, alerting to a webhook here (``config``: more of its config file)."""
        self.receiver = WebhookReceiver()
        self.watchdog = WatchdogProcess(
            self.home.api_url,
            self.receiver.url,
            self.home.logs,
            options=options,
            config_extra=config or {},
            token=token,
        )
        self.watchdog.start()
        self.sessions.add(self.watchdog.pid or -1)
        self.progress(
            f"watchdog started beside Airflow (pid {self.watchdog.pid}), alerts to {self.receiver.url}"
        )

    def cleanup(self) -> int:
        """SIGKILL every process group started, then every straggler; returns how many are left."""
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.meter is not None:
            self.meter.stop()
        for component in self.scenario.components.values() if self.scenario else []:
            component.kill_group()
        if self.fleet is not None:
            self.fleet.stop()
        kill_drill_processes(self.sessions, self.home.airflow_home)
        if self.cluster is not None:
            self.cluster.stop()
        if self.mariadb is not None:
            self.mariadb.stop(keep_files=self.args.keep)
        if self.vendors is not None:
            self.vendors.stop()
        if self.receiver is not None:
            self.receiver.close()
        return len(drill_processes(self.sessions, self.home.airflow_home))
