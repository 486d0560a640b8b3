"""Cases a reviewer would find hard too: helpers, clients, autocommit, anti-joins, SQL in a Variable."""

from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import dag, task
from team_lib.partner import PartnerClient, push_totals


class Exporter:
    def __init__(self, url: str):
        self.url = url

    def ship(self, rows: list) -> None:
        import requests

        requests.post(self.url, json=rows, timeout=30)


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def harder_cases():
    @task
    def push_via_helper_module():
        push_totals({"eur": 1})

    @task
    def push_via_client_class():
        client = PartnerClient()
        client.send_order({"id": 1})

    @task
    def read_via_client_class():
        return PartnerClient().orders()

    @task
    def ship_via_local_class():
        Exporter("https://sink.example.com/rows").ship([1, 2])

    @task
    def overwrite_autocommit(ds=None):
        import psycopg2

        conn = psycopg2.connect("dbname=dwh")
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("DELETE FROM mart.kpi WHERE day = %s", (ds,))
        cur.execute("INSERT INTO mart.kpi SELECT * FROM staging.kpi WHERE day = %s", (ds,))

    SQLExecuteQueryOperator(
        task_id="insert_missing_only",
        conn_id="postgres_dwh",
        sql="""INSERT INTO mart.customers (id, email)
               SELECT s.id, s.email FROM staging.customers s
               WHERE NOT EXISTS (SELECT 1 FROM mart.customers c WHERE c.id = s.id)""",
    )
    SQLExecuteQueryOperator(task_id="sql_from_variable", conn_id="postgres_dwh", sql="{{ var.value.nightly_sql }}")

    push_via_helper_module()
    push_via_client_class()
    read_via_client_class()
    ship_via_local_class()
    overwrite_autocommit()


harder_cases()
