from datetime import datetime

from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def duckdb_local():
    @task
    def append_local():
        import duckdb

        con = duckdb.connect("/data/lake.duckdb")
        con.execute("INSERT INTO events SELECT * FROM read_parquet('/data/in/*.parquet')")

    @task
    def rebuild_local():
        import duckdb

        con = duckdb.connect("/data/lake.duckdb")
        con.execute("CREATE OR REPLACE TABLE daily AS SELECT day, count(*) AS n FROM events GROUP BY day")

    append_local()
    rebuild_local()


duckdb_local()
