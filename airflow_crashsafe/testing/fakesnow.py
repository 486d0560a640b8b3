"""A local Snowflake emulator for your tests: ``fakesnow``'s server in a process of its own.

``fakesnow`` answers Snowflake's HTTP protocol (the real ``snowflake-connector-python`` and the
Snowflake provider's ``SnowflakeHook`` talk to it) and runs the SQL, translated by sqlglot, in
DuckDB. Several connections, from threads or processes, share its databases::

    from airflow_crashsafe.testing.fakesnow import airflow_uri, make_url, start_server

    server = start_server()  # python -m fakesnow's server on a free 127.0.0.1 port
    try:
        url = make_url(server)  # snowflake://test:test@fakesnow/DB_.../PUBLIC?host=...&protocol=http
        ...  # connect_url(url), or AIRFLOW_CONN_WAREHOUSE=airflow_uri(url) for a SnowflakeHook
    finally:
        server.stop()

It speaks plain HTTP, and the provider passes the connector no ``protocol`` (it is always https
against the real service), so a process using a ``snowflake`` Airflow connection against it must
call :func:`use_plain_http` first. What an emulator cannot prove is in docs/databases.md.
Importing this module starts nothing and loads no driver.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from importlib.util import find_spec
from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = [
    "FakesnowServer",
    "FakesnowUnavailable",
    "airflow_uri",
    "make_url",
    "start_server",
    "use_plain_http",
]

# The server, stopped when the process that started it is gone (no stop(): a crashed test run).
_SERVE = """
import os, sys, threading, time
owner = int(sys.argv[2])
def watch():
    while True:
        if os.getppid() != owner:
            os._exit(0)
        time.sleep(0.5)
threading.Thread(target=watch, daemon=True).start()
import uvicorn
import fakesnow.server
uvicorn.run(fakesnow.server.app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


class FakesnowUnavailable(RuntimeError):
    """The emulator (``fakesnow[server]``) is not installed, or its server did not start."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class FakesnowServer:
    """A running emulator: its port and process."""

    port: int
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()


def start_server(*, timeout: float = 90.0) -> FakesnowServer:
    """Start ``fakesnow``'s server; raises :class:`FakesnowUnavailable` when it is not installed.

    Its start imports DuckDB, fakesnow and uvicorn: a few seconds alone, but past 30 s when test
    workers start PostgreSQL and MariaDB servers beside it on two cores. The wait ends as soon as
    the port answers, so a long ``timeout`` costs nothing when the machine is idle.
    """
    for module in ("fakesnow", "uvicorn", "starlette", "snowflake.connector"):
        if find_spec(module) is None:
            raise FakesnowUnavailable(
                f"{module} is not installed; pip install 'airflow-crashsafe[snowflake]' 'fakesnow[server]'"
            )
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(port), str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace")[-2000:] if process.stderr else ""
            if process.stderr is not None:
                process.stderr.close()
            raise FakesnowUnavailable(f"fakesnow's server exited ({process.returncode}): {err}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return FakesnowServer(port, process)
        time.sleep(0.05)
    FakesnowServer(port, process).stop()
    raise FakesnowUnavailable(f"fakesnow's server did not listen on port {port} within {timeout:.0f} s")


def make_url(server: FakesnowServer, *, prefix: str = "crashsafe_test") -> str:
    """The URL of a new database of the emulator (it is created at the first login)."""
    database = f"{prefix}_{uuid.uuid4().hex[:10]}".upper()
    query = urlencode({"host": "127.0.0.1", "port": server.port, "protocol": "http"})
    return f"snowflake://test:test@fakesnow/{database}/PUBLIC?{query}"


def airflow_uri(url: str) -> str:
    """:func:`make_url`'s URL as an Airflow ``snowflake`` connection (account, database, host, port)."""
    parts = urlsplit(url)
    database, schema = parts.path.strip("/").split("/")
    extra = {k: v for k, v in parse_qsl(parts.query) if k != "protocol"}
    query = urlencode({"account": parts.hostname, "database": database, **extra})
    return f"snowflake://{parts.username}:{parts.password}@{parts.hostname}/{schema}?{query}"


def use_plain_http() -> None:
    """Make the connector default to http in this process, as the emulator serves (tests only)."""
    from snowflake.connector.connection import DEFAULT_CONFIGURATION

    DEFAULT_CONFIGURATION["protocol"] = ("http", str)
