from datetime import datetime
from pathlib import Path

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG(
    "file_sql",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    template_searchpath=[str(Path(__file__).parent / "sql")],
):
    SQLExecuteQueryOperator(task_id="load_events", conn_id="postgres_dwh", sql="load_events.sql")
    SQLExecuteQueryOperator(task_id="rebuild_daily", conn_id="postgres_dwh", sql="rebuild_daily.sql", autocommit=True)
    SQLExecuteQueryOperator(task_id="report", conn_id="postgres_dwh", sql="report.sql")
    SQLExecuteQueryOperator(task_id="upsert_users", conn_id="postgres_dwh", sql="upsert_users.sql")
