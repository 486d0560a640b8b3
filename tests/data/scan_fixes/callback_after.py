from __future__ import annotations

import os
from datetime import datetime

import requests
from airflow.sdk import DAG, task

from airflow_crashsafe.effects import effect

ONCALL_WEBHOOK = os.environ.get("ONCALL_WEBHOOK", "https://hooks.slack.com/services/T000/B000/oncall")


def alert_oncall(context):
    dag_run = context.get("dag_run")
    text = f"check {dag_run.dag_id if dag_run else 'pipeline'}"
    requests.post(ONCALL_WEBHOOK, json={"text": text}, timeout=10)


with DAG(
    "fix_callback_after",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    on_failure_callback=alert_oncall,
):

    @task
    def page_oncall(**context):
        with effect("page_oncall", context=context) as fx:
            if fx.pending:
                alert_oncall(context)
                fx.done()

    page_oncall()
