from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("bigquery_style", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "bigquery_analytics"}):
    SQLExecuteQueryOperator(
        task_id="merge_sessions",
        sql="""MERGE `acme.analytics.sessions` t USING `acme.raw.sessions` s ON t.session_id = s.session_id
               WHEN MATCHED THEN UPDATE SET duration = s.duration
               WHEN NOT MATCHED THEN INSERT (session_id, duration) VALUES (s.session_id, s.duration)""",
    )
    SQLExecuteQueryOperator(
        task_id="append_hits", sql="INSERT INTO `acme.analytics.hits` SELECT * FROM `acme.raw.hits` WHERE dt = '{{ ds }}'"
    )
    SQLExecuteQueryOperator(
        task_id="replace_daily",
        sql="CREATE OR REPLACE TABLE `acme.analytics.daily` AS SELECT dt, count(*) AS n FROM `acme.raw.hits` GROUP BY dt",
    )
