from datetime import datetime

from airflow.providers.http.hooks.http import HttpHook
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG


def pull_accounts(**_):
    return HttpHook(method="GET", http_conn_id="crm_api").run("/accounts").json()


def push_accounts(**_):
    HttpHook(method="POST", http_conn_id="erp_api").run("/accounts/import", json={"source": "crm"})


with DAG("api_sync_classic", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    PythonOperator(task_id="pull_accounts", python_callable=pull_accounts)
    PythonOperator(task_id="push_accounts", python_callable=push_accounts)
