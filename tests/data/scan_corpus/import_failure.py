"""Fails to import where the scan runs: the Snowflake provider is not installed."""

from datetime import datetime

from airflow.providers.snowflake.operators.snowflake import SnowflakeSqlApiOperator
from airflow.sdk import DAG

with DAG("import_failure", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    SnowflakeSqlApiOperator(task_id="load_snowflake", sql="INSERT INTO t SELECT * FROM s", statement_count=1)
    SnowflakeSqlApiOperator(task_id="merge_snowflake", sql="MERGE INTO t USING s ON t.id = s.id", statement_count=1)
    SnowflakeSqlApiOperator(task_id="check_snowflake", sql="SELECT 1", statement_count=1)
