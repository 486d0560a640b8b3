"""Fails to import where the scan runs: the Databricks provider is not installed."""

from datetime import datetime

from airflow.providers.databricks.operators.databricks_sql import DatabricksSqlOperator
from airflow.sdk import DAG

with DAG("import_failure", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    DatabricksSqlOperator(task_id="load_databricks", sql="INSERT INTO t SELECT * FROM s")
    DatabricksSqlOperator(task_id="merge_databricks", sql="MERGE INTO t USING s ON t.id = s.id")
    DatabricksSqlOperator(task_id="check_databricks", sql="SELECT 1")
