"""Bulk loads with COPY through psycopg2 and the Postgres hook."""

from datetime import datetime

from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import dag, task
from psycopg2.extras import execute_batch


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["loads"])
def copy_loads():
    @task
    def copy_events_in(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        hook.copy_expert("COPY staging.events FROM STDIN WITH CSV HEADER", f"/data/events/{ds}.csv")

    @task
    def copy_daily_out(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        hook.copy_expert(
            f"COPY (SELECT * FROM mart.daily WHERE day = '{ds}') TO STDOUT WITH CSV HEADER",
            f"/data/exports/daily_{ds}.csv",
        )

    @task
    def copy_clicks_from_file(ds=None):
        conn = PostgresHook(postgres_conn_id="postgres_dwh").get_conn()
        with conn.cursor() as cur, open(f"/data/clicks/{ds}.tsv") as fh:
            cur.copy_from(fh, "staging.clicks", sep="\t")
        conn.commit()

    @task
    def bulk_load_rows(ds=None):
        PostgresHook(postgres_conn_id="postgres_dwh").bulk_load("staging.raw_rows", f"/data/raw/{ds}.tsv")

    @task
    def reload_events_atomically(ds=None):
        conn = PostgresHook(postgres_conn_id="postgres_dwh").get_conn()
        with conn.cursor() as cur, open(f"/data/events/{ds}.csv") as fh:
            cur.execute("TRUNCATE staging.events_today")
            cur.copy_expert("COPY staging.events_today FROM STDIN WITH CSV HEADER", fh)
        conn.commit()

    @task
    def insert_readings(readings: list | None = None):
        conn = PostgresHook(postgres_conn_id="postgres_iot").get_conn()
        with conn.cursor() as cur:
            execute_batch(
                cur,
                "INSERT INTO iot.readings (sensor_id, taken_at, value) VALUES (%s, %s, %s)",
                readings or [],
            )
        conn.commit()

    copy_events_in()
    copy_daily_out()
    copy_clicks_from_file()
    bulk_load_rows()
    reload_events_atomically()
    insert_readings()


copy_loads()
