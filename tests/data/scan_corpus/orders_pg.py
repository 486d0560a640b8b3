from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("orders_pg", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    SQLExecuteQueryOperator(
        task_id="create_orders",
        conn_id="postgres_dwh",
        sql="CREATE TABLE IF NOT EXISTS mart.orders (id bigint PRIMARY KEY, day date, amount numeric)",
    )
    SQLExecuteQueryOperator(
        task_id="append_orders",
        conn_id="postgres_dwh",
        sql="INSERT INTO mart.orders_log (day, amount) SELECT day, amount FROM staging.orders WHERE day = '{{ ds }}'",
    )
    SQLExecuteQueryOperator(
        task_id="count_orders",
        conn_id="postgres_dwh",
        sql="SELECT count(*) FROM mart.orders WHERE day = '{{ ds }}'",
    )
    SQLExecuteQueryOperator(
        task_id="upsert_orders",
        conn_id="postgres_dwh",
        sql="""INSERT INTO mart.orders (id, day, amount)
               SELECT id, day, amount FROM staging.orders WHERE day = %(day)s
               ON CONFLICT (id) DO UPDATE SET amount = excluded.amount""",
        parameters={"day": "{{ ds }}"},
    )
