from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG

with DAG("fix_trigger_after", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    TriggerDagRunOperator(task_id='kick_reports', trigger_dag_id='reports', trigger_run_id='{{ run_id }}_reports', skip_when_already_exists=True)  # noqa: E501  # fmt: skip
