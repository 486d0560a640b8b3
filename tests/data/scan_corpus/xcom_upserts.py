from datetime import datetime

from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import dag, task

UPSERT = """
INSERT INTO mart.fx (day, ccy, rate) VALUES (%(day)s, %(ccy)s, %(rate)s)
ON CONFLICT (day, ccy) DO UPDATE SET rate = excluded.rate
"""


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def xcom_upserts():
    @task
    def rates() -> list[dict]:
        return [{"ccy": "EUR", "rate": 1.0}]

    @task
    def upsert(rows: list[dict], ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        for row in rows:
            hook.run(UPSERT, parameters={"day": ds, **row})

    @task
    def prune(ds=None):
        PostgresHook(postgres_conn_id="postgres_dwh").run("DELETE FROM mart.fx WHERE day < now() - interval '2 years'")

    upsert(rates())
    prune()


xcom_upserts()
