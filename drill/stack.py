"""A bare, booted Airflow (api-server, scheduler, dag-processor) to crash again and again.

The crash drill boots Airflow once per drill; the watchdog's end-to-end tests and its latency
benchmark need the same real components, but idle (no DAGs) and several crashes per boot. This
reuses the drill's pieces — temporary home, environment, :class:`Component`, the throwaway
PostgreSQL cluster for a metadata DB that HA schedulers can share — and cleans up as the drill
does: ``close()`` SIGKILLs every process group it started.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from drill.airflow_home import DrillHome, component_env
from drill.cluster import PostgresCluster, find_pg_bin, sqlalchemy_url
from drill.components import (
    Component,
    airflow_component,
    drill_processes,
    health,
    kill_drill_processes,
    wait_until,
)

__all__ = ["AirflowStack"]


class AirflowStack:
    """Boot with :meth:`start`; :meth:`crash`/:meth:`restart` components; always :meth:`close`."""

    def __init__(
        self,
        workdir: str | None = None,
        *,
        health_check_threshold: int = 30,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.home = DrillHome.create(workdir)
        self.threshold = health_check_threshold
        #: ``AIRFLOW__*`` / ``AIRFLOW_CONN_*`` variables every component (and task) gets on top.
        self.extra_env = dict(extra_env or {})
        self.cluster: PostgresCluster | None = None
        self.pg_outside: Path | None = None
        self.sessions: set[int] = set()
        self.components: dict[str, Component] = {}
        self.env: dict[str, str] = {}
        self._starts: dict[str, int] = {}

    @property
    def api_url(self) -> str:
        return self.home.api_url

    @property
    def dags_folder(self) -> Path:
        return self.home.airflow_home / "dags"

    def add_dag(self, source: str | Path) -> Path:
        """Copy a DAG file into the dags folder (before :meth:`start`, or any time after)."""
        self.dags_folder.mkdir(parents=True, exist_ok=True)
        target = self.dags_folder / Path(source).name
        shutil.copyfile(source, target)
        return target

    def start(self, boot_timeout: float = 240.0) -> AirflowStack:
        """PostgreSQL metadata DB, ``db migrate``, then the three components until healthy."""
        pg_bin = find_pg_bin()
        if pg_bin is None:
            raise RuntimeError("no PostgreSQL binaries found (set CRASHSAFE_PG_BIN or install postgresql)")
        pg_root = self.home.root / "pg"
        if os.geteuid() == 0:  # the cluster runs as ``postgres``: keep it out of private parents
            pg_root = self.pg_outside = Path(tempfile.mkdtemp(prefix="crashsafe-stack-pg-"))
        self.cluster = PostgresCluster(root=pg_root, bin_dir=pg_bin)
        self.cluster.start(["airflow"], self.home.logs / "postgres.log")
        self.sessions.add(self.cluster.proc.pid if self.cluster.proc else -1)
        dags = self.dags_folder
        dags.mkdir(exist_ok=True)
        self.env = component_env(
            self.home,
            dags_folder=dags,
            metadata_url=sqlalchemy_url(self.cluster.url("airflow")),
            health_check_threshold=self.threshold,
            extra=self.extra_env,
        )
        migrate = self._component("db-migrate")
        migrate.start()
        self.sessions.add(migrate.pid or -1)
        migrate.wait_success(timeout=300)
        for name in ("api-server", "scheduler", "dag-processor"):
            self.launch(name)
        self.wait_healthy(boot_timeout)
        return self

    def _component(self, name: str) -> Component:
        return airflow_component(name, self.env, self.home.logs, self._starts)

    def launch(self, name: str, as_name: str | None = None) -> Component:
        """Start component ``name`` (registered as ``as_name``, e.g. a second scheduler)."""
        component = self._component(name)
        component.start()
        self.sessions.add(component.pid or -1)
        self.components[as_name or name] = component
        return component

    def crash(self, name: str) -> float:
        """SIGKILL the component's main process, as an OOM kill would; returns the kill time."""
        self.components[name].crash()
        return time.time()

    def restart(self, name: str) -> float:
        """Start ``name`` again; returns the start time."""
        self.launch(name if not name.startswith("scheduler") else "scheduler", name)
        return time.time()

    def health(self) -> dict[str, Any]:
        return health(self.api_url) or {}

    def wait_healthy(self, timeout: float = 120.0) -> None:
        """Until the scheduler and dag-processor report healthy through the api-server."""

        def healthy() -> bool:
            for component in self.components.values():
                if not component.alive():
                    raise RuntimeError(f"{component.name} exited:\n{component.tail()}")
            body = self.health()
            return all((body.get(p) or {}).get("status") == "healthy" for p in ("scheduler", "dag_processor"))

        wait_until("Airflow to become healthy", healthy, timeout)

    def close(self) -> int:
        """SIGKILL everything started; returns how many processes are left (0 expected)."""
        for component in self.components.values():
            component.kill_group()
        kill_drill_processes(self.sessions, self.home.airflow_home)
        if self.cluster is not None:
            self.cluster.stop()
        left = len(drill_processes(self.sessions, self.home.airflow_home))
        self.home.remove()
        if self.pg_outside is not None:
            shutil.rmtree(self.pg_outside, ignore_errors=True)
        return left
