from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("partitions", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    SQLExecuteQueryOperator(
        task_id="overwrite_day",
        conn_id="postgres_dwh",
        sql=[
            "DELETE FROM mart.revenue WHERE day = %(day)s",
            "INSERT INTO mart.revenue SELECT day, region, sum(amount) FROM staging.orders WHERE day = %(day)s GROUP BY 1, 2",
        ],
        parameters={"day": "{{ ds }}"},
    )
    SQLExecuteQueryOperator(
        task_id="overwrite_day_autocommit",
        conn_id="postgres_dwh",
        sql=[
            "DELETE FROM mart.revenue_eu WHERE day = '{{ ds }}'",
            "INSERT INTO mart.revenue_eu SELECT * FROM staging.revenue_eu WHERE day = '{{ ds }}'",
        ],
        autocommit=True,
    )
    SQLExecuteQueryOperator(
        task_id="overwrite_region",
        conn_id="postgres_dwh",
        sql="DELETE FROM mart.targets WHERE region = 'emea'; INSERT INTO mart.targets SELECT * FROM staging.targets",
    )
    SQLExecuteQueryOperator(
        task_id="full_refresh",
        conn_id="postgres_dwh",
        sql="TRUNCATE mart.dim_region; INSERT INTO mart.dim_region SELECT * FROM staging.regions",
    )
