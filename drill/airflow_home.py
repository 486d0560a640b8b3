"""A throwaway AIRFLOW_HOME for one drill: directories, free ports and the components' environment.

Everything is passed as ``AIRFLOW__SECTION__KEY`` environment variables rather than written into
``airflow.cfg``, so the same environment reaches every component and every LocalExecutor worker
(they inherit it), and nothing from the user's own ``~/airflow`` leaks in.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DrillHome", "component_env", "free_port", "repo_root"]


def repo_root() -> Path:
    """The checkout holding ``drill/`` (put on the components' PYTHONPATH, so that a checkout's
    ``airflow_crashsafe`` is the one Airflow loads)."""
    return Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port nobody listens on right now (so parallel drills and other services never clash)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DrillHome:
    """The temporary directory tree of one drill; ``remove()`` deletes it unless it is kept."""

    root: Path
    airflow_home: Path = field(init=False)
    #: The components' own logs (the tasks' logs are in :attr:`task_logs`).
    logs: Path = field(init=False)
    metadata_sqlite: Path = field(init=False)
    task_logs: Path = field(init=False)
    api_port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self.airflow_home = self.root / "airflow_home"
        self.logs = self.root / "component_logs"
        self.metadata_sqlite = self.airflow_home / "airflow.db"
        self.task_logs = self.airflow_home / "logs"
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, parent: str | None = None) -> DrillHome:
        """Make a fresh tree under ``parent`` (default: the system temp dir)."""
        root = Path(tempfile.mkdtemp(prefix="crashsafe-drill-", dir=parent))
        # The throwaway PostgreSQL cluster runs as another user and must traverse this directory.
        root.chmod(0o755)
        return cls(root=root)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def component_env(
    home: DrillHome,
    *,
    dags_folder: Path,
    metadata_url: str,
    extra: dict[str, str] | None = None,
    health_check_threshold: int = 30,
    parallelism: int = 32,
) -> dict[str, str]:
    """The environment every Airflow component of the drill runs with.

    ``extra`` carries the ``AIRFLOW_CONN_*`` variables (warehouse, crashsafe store): connections
    passed this way reach task processes without touching the metadata DB.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    venv_bin = str(Path(sys.executable).parent)
    python_path = [str(repo_root()), str(dags_folder)]
    if env.get("PYTHONPATH"):
        python_path.append(env["PYTHONPATH"])
    env.update(
        {
            "AIRFLOW_HOME": str(home.airflow_home),
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(python_path),
            "PYTHONUNBUFFERED": "1",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{home.api_url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(home.api_port),
            "AIRFLOW__API__BASE_URL": home.api_url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": str(health_check_threshold),
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__CRASHSAFE__EMBEDDED_PATH": str(home.airflow_home / "crashsafe.db"),
        }
    )
    env.update(extra or {})
    return env
