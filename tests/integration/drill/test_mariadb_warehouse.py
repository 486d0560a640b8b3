"""The drill's warehouse on real MariaDB (``--warehouse mariadb``): its DAGs' SQL and the read-back."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from types import ModuleType

import pytest

from airflow_crashsafe.operators import NaturalKeyMergeOperator, PartitionOverwriteOperator
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.testing.context import fake_context
from drill.dags import DAGS, EXAMPLES
from drill.writes import read_fences, read_warehouse

pytestmark = pytest.mark.integration

DAY = "2024-01-01"
REGION = "r01"


def _load(side: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{DAGS[side][0]}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dag_module(side: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """One drill DAG's module as the drill's components parse it with the MariaDB warehouse."""
    monkeypatch.setenv("CRASHSAFE_DRILL_WAREHOUSE", "mariadb")
    monkeypatch.setenv("CRASHSAFE_DRILL_REGIONS", "1")
    return _load(side, f"crashsafe_drill_{side}_mariadb")


def _rendered(sql: str, task_id: str, dag_id: str) -> str:
    """What Airflow's templating makes of a load's SQL, with no work to wait for."""
    for template, value in (
        ("{{ params.work_seconds }}", "0"),
        ("{{ ti.dag_id }}", dag_id),
        ("{{ ti.task_id }}", task_id),
    ):
        sql = sql.replace(template, value)
    return sql


@pytest.fixture
def warehouse(mariadb_url: str, mariadb_server_url: str) -> Iterator[str]:
    """A fresh MariaDB database; the drill's schemas (databases on MariaDB) are dropped afterwards."""
    yield mariadb_url
    db = connect_url(mariadb_server_url)
    try:
        for _, schema in DAGS.values():
            db.execute(f"DROP DATABASE IF EXISTS {schema}")
    finally:
        db.close()


def _setup(url: str, statements: list[str]) -> None:
    db = connect_url(url)
    try:
        with db.autocommit():
            for statement in statements:
                db.raw.cursor().execute(statement, {"day": DAY, "regions": 1})
    finally:
        db.close()


def test_the_plain_load_runs_twice_and_the_read_back_sees_it(
    warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control's setup and load run on MariaDB; a second run doubles the revenue, as read back."""
    plain = _dag_module("plain", monkeypatch)
    _setup(warehouse, plain.SETUP)
    _setup(warehouse, plain.SETUP)  # idempotent, as the setup task must be
    load = _rendered(plain.LOAD_REVENUE, f"load_revenue_{REGION}", plain.dag.dag_id)
    db = connect_url(warehouse)
    try:
        with db.autocommit():
            for _ in range(2):
                db.raw.cursor().execute(load, {"day": DAY, "region": REGION})
    finally:
        db.close()
    found = read_warehouse(warehouse, "drill_plain", DAY)
    assert (found.orders, found.fact_rows, found.fact_keys) == (40, 80, 40)
    assert found.revenue_actual == pytest.approx(2 * found.revenue_expected)
    assert found.revenue_expected == pytest.approx(2670.0)


def test_the_crashsafe_loads_are_exact_and_their_fences_read_back(
    warehouse: str, monkeypatch: pytest.MonkeyPatch, airflow_conn: Callable[[str, str], str]
) -> None:
    """The crashsafe DAG's MERGE and overwrite run fenced on MariaDB; a second try changes nothing."""
    safe = _dag_module("crashsafe", monkeypatch)
    dag_id = safe.dag.dag_id
    conn_id = airflow_conn(safe.CONN_ID, warehouse)
    _setup(warehouse, safe.SETUP)
    params = {"day": DAY, "region": REGION}
    for try_number in (1, 2):
        tasks = [
            NaturalKeyMergeOperator(
                task_id=f"merge_revenue_{REGION}",
                conn_id=conn_id,
                target_table="drill_crashsafe.fact_revenue",
                sql=_rendered(safe.REVENUE_SOURCE, f"merge_revenue_{REGION}", dag_id),
                natural_key=["day", "region", "order_id"],
                update_columns=["amount"],
                parameters=params,
            ),
            PartitionOverwriteOperator(
                task_id=f"overwrite_lines_{REGION}",
                conn_id=conn_id,
                target_table="drill_crashsafe.order_lines",
                partition=params,
                sql=_rendered(safe.LINES_SOURCE, f"overwrite_lines_{REGION}", dag_id),
                parameters=params,
            ),
            NaturalKeyMergeOperator(
                task_id="revenue_total",
                conn_id=conn_id,
                target_table="drill_crashsafe.daily_revenue",
                sql=safe.TOTAL_SOURCE,
                natural_key=["day"],
                update_columns=["revenue"],
                parameters={"day": DAY},
            ),
        ]
        for task in tasks:
            context = fake_context(
                dag_id=dag_id,
                task_id=task.task_id,
                run_id="manual__2024-01-01",
                logical_date=datetime(2024, 1, 1, tzinfo=timezone.utc),
                try_number=try_number,
            )
            task.execute(context)
    found = read_warehouse(warehouse, "drill_crashsafe", DAY)
    counts = (found.orders, found.fact_rows, found.fact_keys, found.line_rows, found.line_keys)
    assert counts == (40, 40, 40, 40, 40)
    assert found.revenue_actual == pytest.approx(found.revenue_expected)
    assert found.revenue_reported == [pytest.approx(found.revenue_expected)]
    fences = read_fences(warehouse, dag_id, DAY)
    assert sorted(f.task_id for f in fences) == ["merge_revenue_r01", "overwrite_lines_r01", "revenue_total"]
    # Try 2 found every slot committed by try 1 and skipped: committed by the try first issued it.
    assert {(f.committed_try, f.rejected_count) for f in fences} == {(1, 0)}


def test_read_fences_before_any_fenced_write_is_empty(warehouse: str) -> None:
    """A warehouse where no fenced operator ran yet has no fence table: no fence rows, no error."""
    assert read_fences(warehouse, "nightly_revenue_crashsafe", DAY) == []


def test_the_dag_files_keep_postgres_spelling_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CRASHSAFE_DRILL_WAREHOUSE the DAGs' setup is PostgreSQL's (pg_sleep, plpgsql)."""
    monkeypatch.delenv("CRASHSAFE_DRILL_WAREHOUSE", raising=False)
    module = _load("plain", "crashsafe_drill_plain_pg")
    assert any("pg_sleep" in s for s in module.SETUP)
    assert not any("SLEEP(" in s for s in module.SETUP)
