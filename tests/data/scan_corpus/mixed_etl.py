from datetime import datetime

import requests
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.providers.smtp.operators.smtp import EmailOperator
from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def mixed_etl():
    @task
    def extract(ds=None) -> list:
        return requests.get("https://api.example.com/orders", params={"day": ds}, timeout=30).json()

    @task
    def transform(rows: list) -> list:
        return [(r["id"], r["amount"]) for r in rows]

    @task
    def load(rows: list):
        PostgresHook(postgres_conn_id="postgres_dwh").insert_rows("mart.orders_api", rows, target_fields=["id", "amount"])

    @task
    def load_upsert(rows: list):
        PostgresHook(postgres_conn_id="postgres_dwh").insert_rows(
            "mart.orders_api_latest", rows, target_fields=["id", "amount"], replace=True, replace_index="id"
        )

    done = EmailOperator(task_id="notify", to="team@example.com", subject="orders loaded", html_content="ok")
    rows = transform(extract())
    load(rows) >> done
    load_upsert(rows)


mixed_etl()
