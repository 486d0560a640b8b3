from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("warehouse_maintenance", schedule="@weekly", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh", "autocommit": True}):
    SQLExecuteQueryOperator(task_id="vacuum_orders", sql="VACUUM ANALYZE mart.orders")
    SQLExecuteQueryOperator(task_id="refresh_mv", sql="REFRESH MATERIALIZED VIEW mart.mv_revenue")
    SQLExecuteQueryOperator(task_id="load_csv", sql="COPY staging.uploads FROM '/data/uploads/{{ ds }}.csv' CSV HEADER")
    SQLExecuteQueryOperator(task_id="add_column", sql="ALTER TABLE mart.orders ADD COLUMN IF NOT EXISTS channel text")
    SQLExecuteQueryOperator(task_id="grant_bi", sql="GRANT SELECT ON ALL TABLES IN SCHEMA mart TO bi_reader")
