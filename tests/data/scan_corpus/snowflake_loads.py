from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("snowflake_loads", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "snowflake_dw"}):
    SQLExecuteQueryOperator(
        task_id="merge_customers",
        sql="""MERGE INTO analytics.customers t USING raw.customers s ON t.customer_id = s.customer_id
               WHEN MATCHED THEN UPDATE SET t.email = s.email, t.tier = s.tier
               WHEN NOT MATCHED THEN INSERT (customer_id, email, tier) VALUES (s.customer_id, s.email, s.tier)""",
    )
    SQLExecuteQueryOperator(
        task_id="copy_events",
        sql="COPY INTO raw.events FROM @raw.events_stage/{{ ds_nodash }}/ FILE_FORMAT = (TYPE = JSON)",
    )
    SQLExecuteQueryOperator(task_id="overwrite_daily", sql="INSERT OVERWRITE INTO analytics.daily_kpis SELECT * FROM analytics.v_kpis")
    SQLExecuteQueryOperator(
        task_id="append_sessions",
        sql="INSERT INTO analytics.sessions SELECT * FROM raw.sessions WHERE load_date = '{{ ds }}'",
    )
    SQLExecuteQueryOperator(
        task_id="bump_visits",
        sql="UPDATE analytics.customer_stats SET visits = visits + 1 WHERE last_seen = '{{ ds }}'",
    )
    SQLExecuteQueryOperator(
        task_id="force_reload",
        sql="COPY INTO raw.events FROM @raw.events_stage FILE_FORMAT = (TYPE = JSON) FORCE = TRUE",
    )
