from __future__ import annotations

from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

from airflow_crashsafe.operators import NaturalKeyMergeOperator

with DAG("fix_warehouse_sql_after", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    NaturalKeyMergeOperator(
        task_id="append_sales_pg",
        conn_id="postgres_dwh",
        target_table="mart.sales",
        sql="SELECT sale_id, amount FROM staging.sales",
        natural_key=["sale_id"],
    )
    SQLExecuteQueryOperator(
        task_id="append_sales_bq",
        conn_id="bigquery_dwh",
        sql="MERGE INTO mart.sales USING (SELECT sale_id, amount FROM staging.sales) AS s "
        "ON mart.sales.sale_id = s.sale_id "
        "WHEN MATCHED THEN UPDATE SET amount = s.amount "
        "WHEN NOT MATCHED THEN INSERT (sale_id, amount) VALUES (s.sale_id, s.amount)",
    )
