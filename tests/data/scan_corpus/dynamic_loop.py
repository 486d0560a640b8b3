from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

REGIONS = ["eu", "us", "apac"]

with DAG("dynamic_loop", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    for region in REGIONS:
        SQLExecuteQueryOperator(
            task_id=f"seed_{region}",
            sql=f"INSERT INTO ref.regions (code) VALUES ('{region}') ON CONFLICT DO NOTHING",
        )
        SQLExecuteQueryOperator(
            task_id=f"append_{region}",
            sql=f"INSERT INTO mart.sales_{region} SELECT * FROM staging.sales WHERE region = '{region}'",
        )
