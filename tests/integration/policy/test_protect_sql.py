"""policy_mode=protect: a plain one-statement INSERT, fenced in place, appends once across retries."""

from __future__ import annotations

from datetime import datetime

import psycopg
import pytest
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

from airflow_crashsafe.policy import task_policy
from airflow_crashsafe.testing import fake_context

pytestmark = pytest.mark.integration


def test_protected_insert_runs_once_per_slot(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Try 1 appends; try 2 of the same slot finds it committed and appends nothing; the SQL is unchanged."""
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", postgres_url)
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__POLICY_MODE", "protect")
    from airflow_crashsafe.scan.rules import conn_type_of
    from airflow_crashsafe.store import reset_store_cache

    conn_type_of.cache_clear()
    reset_store_cache()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int, day date)")
        conn.execute("CREATE TABLE orders_log (id int, day date)")
        conn.execute("INSERT INTO orders SELECT g, '2024-01-02' FROM generate_series(1, 5) g")
    with DAG("protect_sql", schedule=None, start_date=datetime(2024, 1, 1)):
        task = SQLExecuteQueryOperator(
            task_id="append_orders",
            conn_id="warehouse",
            sql="INSERT INTO orders_log SELECT id, day FROM orders WHERE day = %(day)s",
            parameters={"day": "2024-01-02"},
        )
    task_policy(task)
    assert task.crashsafe_fence_target == "orders_log"
    for try_number in (1, 2):
        context = {
            **fake_context(dag_id="protect_sql", task_id="append_orders", try_number=try_number),
            "task": task,
        }
        task.execute(context)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM orders_log").fetchone() == (5,)
