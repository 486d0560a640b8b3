"""The drill's throwaway PostgreSQL cluster (warehouse, crashsafe store, optional metadata DB) and URLs.

PostgreSQL is the warehouse because the crashsafe MERGE and partition operators are first-class
there and SQLite serialises writers. The cluster runs on a private port and socket directory, as
the ``postgres`` user when the drill runs as root (``initdb``/``postgres`` refuse root).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from drill.airflow_home import free_port

__all__ = [
    "PG_BIN_CANDIDATES",
    "PostgresCluster",
    "airflow_conn_uri",
    "find_pg_bin",
    "libpq_url",
    "sqlalchemy_url",
]

PG_BIN_CANDIDATES = [f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15, 14, 13)]


def find_pg_bin() -> Path | None:
    """Directory holding ``initdb`` and ``postgres``, or None when PostgreSQL is not installed."""
    candidates = [os.environ.get("CRASHSAFE_PG_BIN", ""), *PG_BIN_CANDIDATES]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists() and (Path(candidate) / "postgres").exists():
            return Path(candidate)
    return None


def airflow_conn_uri(url: str) -> str:
    """An Airflow connection URI (``postgres://`` / ``sqlite://``) for a SQLAlchemy-style URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme in ("postgresql", "postgres"):
        return urlunsplit(("postgres", *parts[1:]))
    return url


def libpq_url(url: str) -> str:
    """A ``postgresql://`` URL (what libpq and psycopg accept) for any ``postgres*://`` URL."""
    parts = urlsplit(url)
    return urlunsplit(("postgresql", *parts[1:])) if parts.scheme.startswith("postgres") else url


def sqlalchemy_url(url: str) -> str:
    """A SQLAlchemy URL using psycopg 3 for a ``postgres(ql)://`` URL; other URLs unchanged."""
    parts = urlsplit(url)
    if parts.scheme in ("postgres", "postgresql"):
        return urlunsplit(("postgresql+psycopg", *parts[1:]))
    return url


@dataclass
class PostgresCluster:
    """A private PostgreSQL cluster living under ``root``; ``stop()`` kills it, data goes with root."""

    root: Path
    bin_dir: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    data_dir: Path = field(init=False)
    socket_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir = self.root / "pgdata"
        self.socket_dir = self.root / "pgsocket"

    @property
    def _user(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None

    def _as_user(self) -> dict[str, Any]:
        """``subprocess`` keywords that drop root to ``postgres`` (none when not root)."""
        if self._user is None:
            return {}
        return {"user": self._user, "group": pwd.getpwnam(self._user).pw_gid, "extra_groups": []}

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self, databases: list[str], log_path: Path, timeout: float = 60.0) -> None:
        """initdb, start on a private port, create ``databases``. Fast, unsafe settings: it is thrown away."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._user is not None:
            uid, gid = pwd.getpwnam(self._user).pw_uid, pwd.getpwnam(self._user).pw_gid
            for path in (self.root, self.socket_dir):
                os.chown(path, uid, gid)
        as_user = self._as_user()
        with log_path.open("ab") as log:
            subprocess.run(
                [
                    str(self.bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                **as_user,
            )
            self.proc = subprocess.Popen(
                [
                    str(self.bin_dir / "postgres"),
                    "-D",
                    str(self.data_dir),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.socket_dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=300",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                **as_user,
            )
        self._wait_ready(timeout)
        for database in databases:
            self.psql(f'CREATE DATABASE "{database}"')

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited at start-up (rc {self.proc.returncode})")
            done = subprocess.run(
                [str(self.bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
            )
            if done.returncode == 0:
                return
            time.sleep(0.3)
        raise TimeoutError(f"PostgreSQL not ready after {timeout:.0f} s")

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run one statement through psql (no driver needed for cluster administration)."""
        done = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-v",
                "ON_ERROR_STOP=1",
                "-Atqc",
                sql,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def stop(self) -> None:
        """SIGKILL the postmaster's whole group; nothing in it is worth a clean shutdown."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.proc = None
