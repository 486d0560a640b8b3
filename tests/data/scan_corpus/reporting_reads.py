from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator, SQLValueCheckOperator
from airflow.sdk import DAG

with DAG("reporting_reads", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    SQLExecuteQueryOperator(task_id="top_customers", sql="SELECT customer_id, sum(amount) FROM mart.orders GROUP BY 1 ORDER BY 2 DESC LIMIT 10")
    SQLExecuteQueryOperator(task_id="explain_plan", sql="EXPLAIN SELECT * FROM mart.orders WHERE day = '{{ ds }}'")
    SQLValueCheckOperator(task_id="rowcount_check", sql="SELECT count(*) FROM mart.orders", pass_value=100, tolerance=0.5)
    SQLExecuteQueryOperator(task_id="show_search_path", sql="SHOW search_path")
