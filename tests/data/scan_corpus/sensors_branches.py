from datetime import datetime

from airflow.providers.common.sql.sensors.sql import SqlSensor
from airflow.providers.http.sensors.http import HttpSensor
from airflow.providers.standard.operators.latest_only import LatestOnlyOperator
from airflow.providers.standard.operators.python import BranchPythonOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.sdk import DAG


def file_ready():
    import os

    return os.path.exists("/data/ready.flag")


def choose(ds=None, **_):
    return "weekend" if datetime.fromisoformat(ds).weekday() >= 5 else "weekday"


with DAG("sensors_branches", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    PythonSensor(task_id="wait_flag", python_callable=file_ready)
    SqlSensor(task_id="wait_rows", conn_id="postgres_dwh", sql="SELECT count(*) > 0 FROM staging.orders")
    HttpSensor(task_id="wait_api", http_conn_id="partner_hook", endpoint="/status")
    BranchPythonOperator(task_id="branch", python_callable=choose)
    LatestOnlyOperator(task_id="latest_only")
