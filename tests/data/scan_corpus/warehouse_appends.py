"""Lake and warehouse loads from dataframes: replace or append, per table."""

from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLInsertRowsOperator
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False, tags=["lake"])
def warehouse_appends():
    @task
    def frame_to_bigquery_append(ds=None):
        import pandas as pd

        frame = pd.read_csv(f"/data/clicks/{ds}.csv")
        frame.to_gbq("raw.clicks", project_id="acme-analytics", if_exists="append")

    @task
    def frame_to_bigquery_replace(ds=None):
        import pandas as pd

        frame = pd.read_csv(f"/data/stores/{ds}.csv")
        frame.to_gbq("ref.stores", project_id="acme-analytics", if_exists="replace")

    @task
    def spark_append_events(ds=None):
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
        df = spark.read.json(f"s3a://acme-landing/events/{ds}/")
        df.write.mode("append").saveAsTable("lake.events")

    @task
    def spark_overwrite_partition(ds=None):
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.getOrCreate()
        df = spark.read.json(f"s3a://acme-landing/orders/{ds}/")
        df.write.mode("overwrite").parquet(f"s3a://acme-lake/orders/dt={ds}/")

    @task
    def redshift_copy_events(ds=None):
        PostgresHook(postgres_conn_id="redshift_dw").run(
            f"COPY analytics.events FROM 's3://acme-landing/events/{ds}/' "
            "IAM_ROLE 'arn:aws:iam::123:role/redshift-copy' FORMAT AS PARQUET"
        )

    @task
    def delta_append(ds=None):
        import pandas as pd
        from deltalake import write_deltalake

        frame = pd.read_parquet(f"/data/metrics/{ds}.parquet")
        write_deltalake("s3://acme-lake/metrics", frame, mode="append")

    @task
    def fetch_rows(ds=None) -> list:
        return [(1, ds), (2, ds)]

    rows = fetch_rows()
    SQLInsertRowsOperator(
        task_id="insert_fetched_rows",
        conn_id="postgres_dwh",
        table_name="staging.fetched",
        rows=rows,
        columns=["id", "day"],
    )
    SQLInsertRowsOperator(
        task_id="upsert_fetched_rows",
        conn_id="postgres_dwh",
        table_name="mart.fetched_latest",
        rows=rows,
        columns=["id", "day"],
        insert_args={"replace": True, "replace_index": "id"},
    )
    frame_to_bigquery_append()
    frame_to_bigquery_replace()
    spark_append_events()
    spark_overwrite_partition()
    redshift_copy_events()
    delta_append()


warehouse_appends()
