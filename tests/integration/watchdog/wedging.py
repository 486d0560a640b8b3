"""A real Airflow metadata database, and a scheduler session wedged the way a SIGKILL leaves it.

``airflow_schema`` runs ``airflow db migrate`` once per module into a database of the throwaway
cluster; each test gets a copy of it (``CREATE DATABASE ... TEMPLATE``, a fraction of a second).
``wedge_factory`` starts a process that opens a session, locks the pool rows as the scheduler's
critical section does (``Pool.slots_stats(lock_rows=True)``: ``FOR NO KEY UPDATE NOWAIT``, then
task instances ``SKIP LOCKED``), forks a child that inherits the socket, and is then SIGKILLed:
the session stays ``idle in transaction`` with no live owner, exactly as LocalExecutor workers
keep it open. The light process is plain psycopg carrying a given ``application_name``; with
``airflow=True`` it is Airflow itself — a ``Job`` run by a ``SchedulerJobRunner``, its row
inserted by ``prepare_for_execution``, its session named by the plugin's listener.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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
    # not autocommit: the first statement opens a transaction; "{{pid}}" in the name is this process's
    conn = psycopg.connect(sys.argv[1], application_name=sys.argv[2].replace("{{pid}}", str(os.getpid())))
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
# Airflow's own scheduler start-up, up to its first critical section: the job row and the
# session's name come from Airflow and the plugin, not from this test.
_AIRFLOW_SCHEDULER = textwrap.dedent(
    f"""
    import os, time
    from sqlalchemy import text
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    job = Job()
    SchedulerJobRunner(job=job)
    job.prepare_for_execution()
    with create_session() as session:  # never leaves the block: SIGKILLed inside it
        Pool.slots_stats(lock_rows=True, session=session)
        session.execute(text({TI_LOCK!r})).all()
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        print(child, job.id, flush=True)
        time.sleep(600)
    """
)


def _with_database(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def airflow_env(url: str) -> dict[str, str]:
    """The environment of an Airflow process on the metadata database ``url`` (a fresh AIRFLOW_HOME)."""
    return {
        **os.environ,
        "AIRFLOW_HOME": tempfile.mkdtemp(prefix="crashsafe-wedge-home-"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url.replace("postgresql://", "postgresql+psycopg2://", 1),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }


@pytest.fixture(scope="module")
def airflow_schema(postgres_server_url: str) -> Iterator[str]:
    """Name of a database holding Airflow's real metadata schema, migrated by ``airflow db migrate``."""
    url = make_database(postgres_server_url, prefix="airflow_schema")
    airflow = str(Path(sys.executable).parent / "airflow")
    done = subprocess.run(
        [airflow, "db", "migrate"],
        env=airflow_env(url),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
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
    """A scheduler process holding the pool locks, and the worker child that keeps its socket.

    ``job_id``: the ``job`` row Airflow inserted for it (``airflow=True`` only).
    """

    owner: subprocess.Popen[bytes]
    child_pid: int
    backend_pid: int
    job_id: int | None = None

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
    """The server pid of the newest session holding Airflow's slot_pool row locks (the one just opened)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE l.relation = 'public.slot_pool'::regclass AND l.mode = 'RowShareLock' "
            "AND a.pid <> pg_backend_pid() ORDER BY a.backend_start DESC LIMIT 1"
        ).fetchone()
    assert row is not None, f"no session holds slot_pool locks (child {child_pid})"
    return int(row[0])


def _ready_line(owner: subprocess.Popen[bytes], deadline: float) -> list[str]:
    """The numbers the wedging process prints once it holds the locks (other output is skipped)."""
    assert owner.stdout is not None
    fd, pending = owner.stdout.fileno(), b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            fields = line.decode(errors="replace").split()
            if fields and all(f.isdigit() for f in fields):
                return fields
    raise AssertionError(f"wedging process failed (exit {owner.poll()})")


class WedgeFactory(Protocol):
    """``start(url, application=..., airflow=False) -> Wedge``."""

    def __call__(self, url: str, application: str = "", *, airflow: bool = False) -> Wedge: ...


@pytest.fixture
def wedge_factory() -> Iterator[WedgeFactory]:
    """``start(url, application)``: a scheduler-like process that has taken the pool locks.

    ``application`` is its session's ``application_name`` (``{pid}`` in it becomes the process's
    pid); with ``airflow=True`` the process is
    Airflow's own scheduler start-up and the name is whatever Airflow and the plugin set.
    """
    started: list[Wedge] = []

    def start(url: str, application: str = "", *, airflow: bool = False) -> Wedge:
        if airflow:
            argv, env = [sys.executable, "-c", _AIRFLOW_SCHEDULER], airflow_env(url)
        else:
            argv, env = [sys.executable, "-c", _SCHEDULER, url, application], dict(os.environ)
        owner = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE)
        try:
            fields = _ready_line(owner, deadline=time.monotonic() + 120)
        except AssertionError:
            owner.kill()
            owner.wait(timeout=10)
            raise
        child = int(fields[0])
        job_id = int(fields[1]) if len(fields) > 1 else None
        wedge = Wedge(owner, child, backend_of(url, child), job_id)
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
