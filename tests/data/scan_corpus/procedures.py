from datetime import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

with DAG("procedures", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False,
         default_args={"conn_id": "postgres_dwh"}):
    SQLExecuteQueryOperator(task_id="call_refresh", sql="CALL mart.refresh_sales('{{ ds }}')")
    SQLExecuteQueryOperator(task_id="select_after", sql="SELECT max(day) FROM mart.sales")
