"""A throwaway PostgreSQL cluster for your tests, and a fresh database per test inside it.

Crashsafe's guarantees are made by the database (row locks, one transaction for the fence check and
the write, server-side statements that outlive their client), so they are worth testing against a
real server rather than a mock. This module starts one on the machine, with no configuration::

    from airflow_crashsafe.testing.postgres import drop_database, make_database, start_cluster

    cluster = start_cluster()  # initdb + pg_ctl on a free 127.0.0.1 port, in a temp dir
    try:
        url = make_database(cluster.admin_url)  # postgresql://postgres@127.0.0.1:PORT/crashsafe_test_...
        ...  # e.g. AIRFLOW_CONN_WAREHOUSE=url
        drop_database(cluster.admin_url, url)
    finally:
        cluster.stop()  # kills the server and deletes its files

The cluster uses the PostgreSQL server binaries (``initdb``, ``pg_ctl``; ``$CRASHSAFE_PG_BINDIR``,
else Debian's ``/usr/lib/postgresql/<major>/bin``), runs them as the ``postgres`` user when we are
root (the server refuses to run as root), listens on 127.0.0.1 with a private socket directory,
trusts every local user and skips ``fsync``: it is fast and must never hold data you want to keep.
If the test process dies without calling ``stop()``, a small reaper process stops the server and
deletes its files. ``make_database`` gives each test a uniquely named database, so a test only
ever drops what it created. Importing this module starts nothing and loads no database driver.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "PostgresCluster",
    "PostgresUnavailable",
    "drop_database",
    "find_bindir",
    "make_database",
    "start_cluster",
]

#: Preferred major version; others are used only when it is absent.
PREFERRED_MAJOR = "15"

# Runs in its own session beside the test process: when that process is gone without having called
# stop() (segfault, SIGKILL, a CI timeout), the cluster is stopped and its files deleted anyway.
_REAPER = """
import os, shutil, subprocess, sys, time
owner, root, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
while os.path.isdir(root):
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
        break
    time.sleep(1)
"""


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries were found on this machine."""


def find_bindir() -> Path:
    """Directory holding ``initdb`` and ``pg_ctl``: ``$CRASHSAFE_PG_BINDIR``, else Debian's layout."""
    configured = os.environ.get("CRASHSAFE_PG_BINDIR")
    if configured:
        candidates = [configured]
    else:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
        candidates = [p for p in found if Path(p).parent.name == PREFERRED_MAJOR] + found[::-1]
    for candidate in candidates:
        if (Path(candidate) / "initdb").is_file() and (Path(candidate) / "pg_ctl").is_file():
            return Path(candidate)
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found (looked in $CRASHSAFE_PG_BINDIR and "
        "/usr/lib/postgresql/*/bin); install the PostgreSQL server package (e.g. apt-get install postgresql) "
        "or set CRASHSAFE_PG_BINDIR to the directory holding initdb and pg_ctl"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


@dataclass
class PostgresCluster:
    """A running throwaway cluster; ``stop()`` kills it and deletes its files."""

    bindir: Path
    root: Path
    port: int
    reaper: subprocess.Popen[bytes] | None = None

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg_ctl_argv(self, *args: str) -> list[str]:
        return _as_server_user([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *args])

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = self._pg_ctl_argv(*args)
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    def _start_reaper(self) -> None:
        stop = self._pg_ctl_argv("stop", "-m", "immediate", "-w", "-t", "60")
        self.reaper = subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(os.getpid()), str(self.root), *stop],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root / 'sock'} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        result = self._pg_ctl("-l", str(self.root / "server.log"), "-o", options, "-w", "-t", "60", "start")
        if result.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace") if self.log_exists() else ""
            raise RuntimeError(
                f"pg_ctl start failed ({result.returncode}): {result.stdout}{result.stderr}\n{log}"
            )
        self._start_reaper()

    def log_exists(self) -> bool:
        return (self.root / "server.log").exists()

    def stop(self) -> None:
        try:
            self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "60")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            if self.reaper is not None:
                self.reaper.terminate()
                self.reaper.wait(timeout=30)


def start_cluster(*, attempts: int = 3) -> PostgresCluster:
    """initdb a cluster in a fresh temp dir and start it on a free 127.0.0.1 port."""
    bindir = find_bindir()
    root = Path(tempfile.mkdtemp(prefix="crashsafe-pg-"))
    (root / "sock").mkdir()
    if os.geteuid() == 0:
        for path in (root, root / "sock"):
            shutil.chown(path, user="postgres", group="postgres")
    initdb = [str(bindir / "initdb"), "-D", str(root / "data"), "-U", "postgres", "--auth=trust"]
    initdb += ["--encoding=UTF8", "--locale=C", "--no-sync"]
    result = subprocess.run(_as_server_user(initdb), capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed ({result.returncode}): {result.stdout}{result.stderr}")
    last_error: Exception | None = None
    for _ in range(attempts):  # another process may grab the free port before the server binds it
        cluster = PostgresCluster(bindir=bindir, root=root, port=_free_port())
        try:
            cluster.start()
            return cluster
        except RuntimeError as exc:
            last_error = exc
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"could not start PostgreSQL in {attempts} attempts: {last_error}")


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def make_database(admin_url: str, *, prefix: str = "crashsafe_test") -> str:
    """Create a database with a unique name on the server of ``admin_url``; return its URL."""
    import psycopg
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return _with_database(admin_url, name)


def drop_database(admin_url: str, url: str) -> None:
    """Drop the database that ``url`` points to (made by :func:`make_database`), closing its sessions."""
    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
