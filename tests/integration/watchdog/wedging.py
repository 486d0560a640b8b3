"""A real Airflow metadata database, and a scheduler session wedged the way a SIGKILL leaves it.

``airflow_schema`` runs ``airflow db migrate`` once per module into a database of the throwaway
cluster; each test gets a copy of it (``CREATE DATABASE ... TEMPLATE``, a fraction of a second).
``wedge`` opens a session, locks the pool rows as the scheduler's critical section does
(``Pool.slots_stats(lock_rows=True)``: ``FOR NO KEY UPDATE NOWAIT``, then task instances ``SKIP
LOCKED``), forks a child that inherits the socket, and the parent is SIGKILLed: the session stays
``idle in transaction`` with no live owner, exactly as LocalExecutor workers keep it open.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.testing.postgres import drop_database, make_database

psycopg = pytest.importorskip("psycopg")
sql = psycopg.sql

#: The scheduler's critical section, as Airflow 3.3.2 sends it (scheduler_job_runner.py, pool.py).
POOL_LOCK = (
    "SELECT slot_pool.pool, slot_pool.slots, slot_pool.include_deferred FROM slot_pool "
    "FOR NO KEY UPDATE NOWAIT"
)
TI_LOCK = (
    "SELECT task_instance.id FROM task_instance WHERE task_instance.state = 'scheduled' "
    "FOR NO KEY UPDATE OF task_instance SKIP LOCKED"
)

_SCHEDULER = textwrap.dedent(
    f"""
    import os, sys, time
    import psycopg
    conn = psycopg.connect(sys.argv[1])  # not autocommit: the first statement opens a transaction
    conn.execute({POOL_LOCK!r}).fetchall()
    conn.execute({TI_LOCK!r}).fetchall()
    child = os.fork()
    if child == 0:  # a LocalExecutor worker: inherits the socket, never touches it
        time.sleep(600)
        os._exit(0)
    print(child, flush=True)
    time.sleep(600)
    """
)


def _with_database(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


@pytest.fixture(scope="module")
def airflow_schema(postgres_server_url: str) -> Iterator[str]:
    """Name of a database holding Airflow's real metadata schema, migrated by ``airflow db migrate``."""
    url = make_database(postgres_server_url, prefix="airflow_schema")
    home = tempfile.mkdtemp(prefix="crashsafe-wedge-home-")
    env = {
        **os.environ,
        "AIRFLOW_HOME": home,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url.replace("postgresql://", "postgresql+psycopg2://", 1),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    done = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield url.rsplit("/", 1)[1]
    finally:
        drop_database(postgres_server_url, url)


@pytest.fixture
def metadata_db(postgres_server_url: str, airflow_schema: str) -> Iterator[str]:
    """URL of a fresh copy of the migrated Airflow metadata database, dropped afterwards."""
    name = f"airflow_meta_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(airflow_schema)
            )
        )
    url = _with_database(postgres_server_url, name)
    try:
        yield url
    finally:
        drop_database(postgres_server_url, url)


@dataclass
class Wedge:
    """A scheduler process holding the pool locks, and the worker child that keeps its socket."""

    owner: subprocess.Popen[str]
    child_pid: int
    backend_pid: int

    def kill_owner(self) -> None:
        """SIGKILL the scheduler: its child keeps the session open, idle in transaction."""
        self.owner.send_signal(signal.SIGKILL)
        self.owner.wait(timeout=10)

    def stop(self) -> None:
        for kill in (lambda: self.owner.kill(), lambda: os.kill(self.child_pid, signal.SIGKILL)):
            with contextlib.suppress(ProcessLookupError):
                kill()
        self.owner.wait(timeout=10)
        if self.owner.stdout is not None:
            self.owner.stdout.close()


def backend_of(url: str, child_pid: int) -> int:
    """The server pid of the newest session holding slot_pool row locks (the one just opened)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "JOIN pg_class c ON c.oid = l.relation WHERE c.relname = 'slot_pool' "
            "AND l.mode = 'RowShareLock' AND a.pid <> pg_backend_pid() ORDER BY a.backend_start DESC LIMIT 1"
        ).fetchone()
    assert row is not None, f"no session holds slot_pool locks (child {child_pid})"
    return int(row[0])


@pytest.fixture
def wedge_factory() -> Iterator[Callable[[str], Wedge]]:
    """``start(url) -> Wedge``: a scheduler-like process that has taken the pool locks."""
    started: list[Wedge] = []

    def start(url: str) -> Wedge:
        owner = subprocess.Popen([sys.executable, "-c", _SCHEDULER, url], stdout=subprocess.PIPE, text=True)
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line.strip().isdigit(), f"wedging process failed (exit {owner.poll()})"
        wedge = Wedge(owner, int(line), backend_of(url, int(line)))
        started.append(wedge)
        return wedge

    yield start
    for wedge in started:
        wedge.stop()


def execute(url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit and return its rows (none for a statement without)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []
