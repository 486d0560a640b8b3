"""A throwaway MariaDB server for your tests, and a fresh database per test inside it.

The MySQL/MariaDB guarantees (InnoDB row locks, the fence check in the write's own transaction)
are worth testing against a real server, as :mod:`airflow_crashsafe.testing.postgres` does for
PostgreSQL::

    from airflow_crashsafe.testing.mariadb import drop_database, make_database, start_server

    server = start_server()  # mariadb-install-db + mariadbd on a free 127.0.0.1 port, in a temp dir
    try:
        url = make_database(server.admin_url)  # mysql://root@127.0.0.1:PORT/crashsafe_test_...
        ...  # e.g. AIRFLOW_CONN_WAREHOUSE=url
        drop_database(server.admin_url, url)
    finally:
        server.stop()  # kills the server and deletes its files

It runs Debian's ``mariadb-install-db`` and ``mariadbd`` (``$CRASHSAFE_MARIADB_BINDIR`` to use
others) with no option files, as the ``mysql`` user when we are root, on its own port and socket,
with ``root`` and no password, and without durability (no binary log, no flush at commit): fast, and
never for data you want to keep. A reaper process stops it and deletes its files if the test
process dies without ``stop()``. Importing this module starts nothing and loads no driver.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["MariaDbServer", "MariaDbUnavailable", "drop_database", "make_database", "start_server"]

# Beside the test process: once it is gone without stop(), kill the server and delete its files.
_REAPER = """
import os, shutil, signal, sys, time
owner, root, pid_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
while os.path.isdir(root):
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        try:
            os.kill(int(open(pid_file).read().strip()), signal.SIGKILL)
        except Exception:
            pass
        shutil.rmtree(root, ignore_errors=True)
        break
    time.sleep(1)
"""


class MariaDbUnavailable(RuntimeError):
    """No MariaDB server binaries were found on this machine."""


def _binary(name: str) -> str:
    configured = os.environ.get("CRASHSAFE_MARIADB_BINDIR")
    found = (
        str(Path(configured) / name)
        if configured
        else shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin")
    )
    if not found or not Path(found).is_file():
        raise MariaDbUnavailable(
            f"MariaDB server binary {name} not found (looked in $CRASHSAFE_MARIADB_BINDIR and PATH); "
            "install the MariaDB server package (e.g. apt-get install mariadb-server) or set "
            "CRASHSAFE_MARIADB_BINDIR to the directory holding mariadbd and mariadb-install-db"
        )
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class MariaDbServer:
    """A running throwaway server; ``stop()`` kills it and deletes its files."""

    root: Path
    port: int
    #: More ``mariadbd`` options, after the defaults (so they win), e.g. a bigger buffer pool.
    options: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    reaper: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/mysql"

    @property
    def socket_path(self) -> Path:
        return self.root / "mysqld.sock"

    def start(self, timeout: float = 60.0) -> None:
        argv = [
            _binary("mariadbd"),
            "--no-defaults",
            f"--datadir={self.root / 'data'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket_path}",
            f"--pid-file={self.root / 'mysqld.pid'}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-buffer-pool-size=64M",
            "--max-connections=200",
            *self.options,
        ]
        if os.geteuid() == 0:
            argv.append("--user=mysql")
        with open(self.root / "server.log", "wb") as log:  # the server keeps its own descriptor
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    self._start_reaper()
                    return
            except OSError:
                time.sleep(0.1)
        text = (self.root / "server.log").read_text(errors="replace")
        self.stop(keep_files=True)
        raise RuntimeError(f"mariadbd did not start on port {self.port}:\n{text[-3000:]}")

    def _start_reaper(self) -> None:
        self.reaper = subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(os.getpid()), str(self.root), str(self.root / "mysqld.pid")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self, *, keep_files: bool = False) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signal.SIGKILL)
                self.process.wait(timeout=30)
        finally:
            if not keep_files:
                shutil.rmtree(self.root, ignore_errors=True)
            if self.reaper is not None:
                self.reaper.terminate()
                self.reaper.wait(timeout=30)
                self.reaper = None


def start_server(*, attempts: int = 3, options: Sequence[str] = ()) -> MariaDbServer:
    """Install a fresh data directory in a temp dir and start ``mariadbd`` on a free port.

    ``options``: more ``mariadbd`` options (``--name=value``), after the defaults.
    """
    install = _binary("mariadb-install-db")
    root = Path(tempfile.mkdtemp(prefix="crashsafe-mariadb-"))
    argv = [install, "--no-defaults", f"--datadir={root / 'data'}", "--skip-test-db"]
    argv += ["--auth-root-authentication-method=normal", "--skip-name-resolve"]
    if os.geteuid() == 0:
        shutil.chown(root, user="mysql", group="mysql")
        argv.append("--user=mysql")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"mariadb-install-db failed ({result.returncode}): {result.stdout}{result.stderr}")
    last_error: Exception | None = None
    for _ in range(attempts):  # another process may take the free port before the server binds it
        server = MariaDbServer(root=root, port=_free_port(), options=tuple(options))
        try:
            server.start()
            return server
        except RuntimeError as exc:
            last_error = exc
    shutil.rmtree(root, ignore_errors=True)
    raise RuntimeError(f"could not start MariaDB in {attempts} attempts: {last_error}")


def _connect(url: str, database: str | None = None) -> object:
    mysqldb = import_module("MySQLdb")  # mysqlclient ships no type stubs

    parts = urlsplit(url)
    return mysqldb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        passwd=parts.password or "",
        **({"database": database} if database else {}),
    )


def make_database(admin_url: str, *, prefix: str = "crashsafe_test") -> str:
    """Create a database with a unique name on the server of ``admin_url``; return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = _connect(admin_url)
    try:
        conn.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")  # type: ignore[attr-defined]
    finally:
        conn.close()  # type: ignore[attr-defined]
    return urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))


def drop_database(admin_url: str, url: str) -> None:
    """Drop the database that ``url`` points to (made by :func:`make_database`)."""
    name = urlsplit(url).path.lstrip("/").replace("`", "``")
    conn = _connect(admin_url)
    try:
        conn.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")  # type: ignore[attr-defined]
    finally:
        conn.close()  # type: ignore[attr-defined]
