from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG, task

TABLES = ["orders", "customers", "refunds"]

with DAG("mapped_sql", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    SQLExecuteQueryOperator.partial(task_id="append_tables", conn_id="postgres_dwh").expand(
        sql=[f"INSERT INTO archive.{t} SELECT * FROM live.{t}" for t in TABLES]
    )
    SQLExecuteQueryOperator.partial(task_id="count_tables", conn_id="postgres_dwh").expand(
        sql=[f"SELECT count(*) FROM live.{t}" for t in TABLES]
    )

    @task
    def double(x: int) -> int:
        return x * 2

    @task
    def notify_partner(order_id: int):
        import requests

        requests.post("https://partner.example.com/orders", json={"id": order_id})

    double.expand(x=[1, 2, 3])
    notify_partner.expand(order_id=[10, 11])
