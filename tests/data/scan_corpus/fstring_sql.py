from datetime import datetime

from airflow.providers.common.sql.hooks.sql import DbApiHook
from airflow.sdk import dag, task


def _hook() -> DbApiHook:
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    return PostgresHook(postgres_conn_id="postgres_app")


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def fstring_sql():
    @task
    def close_day(ds=None):
        _hook().run(f"UPDATE app.days SET status = 'closed' WHERE day = '{ds}'")

    @task
    def copy_day(ds=None):
        table = "app.events"
        _hook().run(f"INSERT INTO {table}_archive SELECT * FROM {table} WHERE day = '{ds}'")

    @task
    def formatted_insert(ds=None):
        sql = "INSERT INTO app.audit (day, note) VALUES ('{}', 'closed')".format(ds)
        _hook().run(sql)

    @task
    def peek(ds=None):
        return _hook().get_records(f"SELECT * FROM app.days WHERE day = '{ds}'")

    close_day()
    copy_day()
    formatted_insert()
    peek()


fstring_sql()
