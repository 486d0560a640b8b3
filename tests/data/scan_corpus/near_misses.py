"""Reads that look like writes to a grep."""

from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("near_misses", schedule=None, start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    SQLExecuteQueryOperator(
        task_id="select_commented_insert",
        sql="-- insert the rows into mart.audit later\nSELECT * FROM staging.audit WHERE day = '{{ ds }}'",
    )
    SQLExecuteQueryOperator(task_id="select_insert_literal", sql="SELECT 'INSERT INTO x VALUES (1)' AS example_statement")
    SQLExecuteQueryOperator(
        task_id="cte_named_inserts",
        sql="WITH inserts AS (SELECT * FROM log WHERE op = 'insert') SELECT count(*) FROM inserts",
    )
    SQLExecuteQueryOperator(task_id="updated_at_column", sql="SELECT id, updated_at, deleted FROM app.users WHERE updated_at > now() - interval '1 day'")
    SQLExecuteQueryOperator(task_id="purge_staging", sql="DELETE FROM staging.events WHERE day < '{{ macros.ds_add(ds, -30) }}'")
