from __future__ import annotations

from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("fix_warehouse_sql_before", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    SQLExecuteQueryOperator(
        task_id="append_sales_pg",
        conn_id="postgres_dwh",
        sql="INSERT INTO mart.sales (sale_id, amount) SELECT sale_id, amount FROM staging.sales",
    )
    SQLExecuteQueryOperator(
        task_id="append_sales_bq",
        conn_id="bigquery_dwh",
        sql="INSERT INTO mart.sales (sale_id, amount) SELECT sale_id, amount FROM staging.sales",
    )
