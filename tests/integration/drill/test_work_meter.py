"""The work meter against real PostgreSQL and the drill DAG's own ``long_work()`` and load SQL."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from drill.work_meter import METER_APPLICATION_NAME, WorkMeter, summarize

pytestmark = pytest.mark.integration

psycopg = pytest.importorskip("psycopg")

DAG_FILE = Path(__file__).resolve().parents[3] / "dags_examples" / "nightly_revenue_plain.py"
DAY = "2024-01-01"
TASK_ID = "load_revenue_r01"
LABEL = f"nightly_revenue_plain/{TASK_ID}"


@pytest.fixture(scope="module")
def plain_dag() -> ModuleType:
    """The control DAG's module, for its SETUP statements and its load's SQL."""
    spec = importlib.util.spec_from_file_location("crashsafe_drill_plain_dag", DAG_FILE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def warehouse(postgres_url: str, plain_dag: ModuleType) -> str:
    """A fresh database holding the control DAG's schema, one region's orders and ``long_work()``."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for statement in plain_dag.SETUP:
            conn.execute(statement, {"day": DAY, "regions": 1})
    return postgres_url


def _load_sql(plain_dag: ModuleType, task_id: str) -> str:
    """The load's SQL as Airflow renders it for ``task_id`` (a long work_seconds: only release ends it)."""
    import jinja2

    ti = SimpleNamespace(dag_id="nightly_revenue_plain", task_id=task_id)
    rendered: str = jinja2.Template(plain_dag.LOAD_REVENUE).render(params={"work_seconds": 120}, ti=ti)
    return rendered


def _wait(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


class Attempt(threading.Thread):
    """One task attempt sending the load on its own connection, as a worker would."""

    def __init__(self, url: str, sql: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.url, self.sql = url, sql
        self.pid: int | None = None
        self.outcome: str | None = None
        self.name_after: str | None = None

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True, application_name=self.name) as conn:
            self.pid = conn.info.backend_pid
            try:
                conn.execute(self.sql, {"day": DAY, "region": "r01"})
            except psycopg.errors.QueryCanceled:
                self.outcome = "cancelled"
                return
            self.outcome = "done"
            row = conn.execute("SELECT current_setting('application_name')").fetchone()
            self.name_after = row[0] if row else None


def _executions(meter: WorkMeter, label: str) -> int:
    work = meter.snapshot().labels.get(label)
    return work.count if work else 0


def test_two_overlapping_attempts_are_two_executions(warehouse: str, plain_dag: ModuleType) -> None:
    """A cancelled attempt and its overlapping successor are 2 executions of the task, both measured."""
    sql = _load_sql(plain_dag, TASK_ID)
    began = time.monotonic()
    with WorkMeter(warehouse, interval=0.1) as meter, psycopg.connect(warehouse, autocommit=True) as admin:
        first = Attempt(warehouse, sql, "attempt-1")
        first.start()
        _wait("the first attempt's execution", lambda: _executions(meter, LABEL) == 1)
        second = Attempt(warehouse, sql, "attempt-2")
        second.start()
        _wait("both executions", lambda: _executions(meter, LABEL) == 2)
        admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
        first.join(60)
        admin.execute("INSERT INTO drill_plain.work_release (day) VALUES (%s)", (DAY,))
        second.join(60)
        result = meter.stop()
        rows = admin.execute("SELECT count(*) FROM drill_plain.fact_revenue").fetchone()
    wall = time.monotonic() - began

    assert (first.outcome, second.outcome) == ("cancelled", "done")
    assert second.name_after == "attempt-2", "the label must end with the statement's transaction"
    assert rows == (40,), "only the released attempt committed its rows"
    work = result.labels[LABEL]
    assert work.count == 2
    assert [e.pid for e in work.executions] == [first.pid, second.pid]
    assert all(0 < s < wall + 1 for s in work.seconds)
    assert result.coverage.failed_samples == 0
    [task] = summarize(result.labels)["nightly_revenue_plain"].tasks
    assert (task.task_id, task.executions) == (TASK_ID, 2)
    assert task.redone == pytest.approx(min(work.seconds))


def test_meter_survives_losing_its_connection(warehouse: str, plain_dag: ModuleType) -> None:
    """A killed sampler connection is a failed sample; the meter reconnects and keeps measuring."""
    label = "nightly_revenue_plain/append_lines_r01"
    with WorkMeter(warehouse, interval=0.1) as meter, psycopg.connect(warehouse, autocommit=True) as admin:
        _wait("a first sample", lambda: meter.snapshot().coverage.samples >= 1)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (METER_APPLICATION_NAME,),
        )
        _wait("a failed sample", lambda: meter.snapshot().coverage.failed_samples >= 1)
        attempt = Attempt(warehouse, _load_sql(plain_dag, "append_lines_r01"), "attempt-1")
        attempt.start()
        _wait("the execution after the reconnect", lambda: _executions(meter, label) == 1)
        admin.execute("SELECT pg_cancel_backend(%s)", (attempt.pid,))
        attempt.join(60)
        result = meter.stop()
    assert result.coverage.failed_samples >= 1
    assert result.coverage.last_error
    assert result.labels[label].count == 1
