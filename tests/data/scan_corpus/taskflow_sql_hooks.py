from datetime import datetime

from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def taskflow_sql_hooks():
    @task
    def load_raw():
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        hook.run("INSERT INTO raw.clicks SELECT * FROM landing.clicks")

    @task
    def read_counts():
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        return hook.get_records("SELECT count(*) FROM raw.clicks")

    @task
    def overwrite_partition(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        conn = hook.get_conn()
        cur = conn.cursor()
        cur.execute("DELETE FROM mart.clicks_daily WHERE day = %s", (ds,))
        cur.execute("INSERT INTO mart.clicks_daily SELECT day, count(*) FROM raw.clicks WHERE day = %s GROUP BY day", (ds,))
        conn.commit()

    @task
    def insert_rows(rows: list | None = None):
        PostgresHook(postgres_conn_id="postgres_dwh").insert_rows("mart.rows", rows or [])

    @task
    def fstring_insert(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        hook.run(f"INSERT INTO mart.visits SELECT * FROM raw.visits WHERE day = '{ds}'")

    @task
    def fstring_overwrite(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        hook.run([f"DELETE FROM mart.visits_daily WHERE day = '{ds}'", f"INSERT INTO mart.visits_daily SELECT * FROM raw.visits WHERE day = '{ds}'"])

    load_raw()
    read_counts()
    overwrite_partition()
    insert_rows()
    fstring_insert()
    fstring_overwrite()


taskflow_sql_hooks()
