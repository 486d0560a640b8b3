from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

from airflow_crashsafe.audit import replay_safe

with DAG("replay_safe_decl", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    replay_safe(
        SQLExecuteQueryOperator(task_id="refresh_cache", sql="INSERT INTO cache.hot SELECT * FROM mart.hot"),
        reason="cache.hot is read with DISTINCT and emptied hourly",
    )
    replay_safe(SQLExecuteQueryOperator(task_id="no_reason", sql="INSERT INTO mart.log SELECT * FROM staging.log"))
