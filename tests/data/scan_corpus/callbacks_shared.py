"""On-call alerts: the same function serves the DAG's failure callback and an explicit alert task."""

from datetime import datetime

import requests
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, task

SLACK_WEBHOOK = "https://hooks.slack.com/services/T000/B000/oncall"


def alert_oncall(context):
    dag_run = context.get("dag_run")
    requests.post(SLACK_WEBHOOK, json={"text": f"check {dag_run.dag_id if dag_run else 'pipeline'}"}, timeout=10)


def post_to_slack(text: str) -> None:
    requests.post(SLACK_WEBHOOK, json={"text": text}, timeout=10)


with DAG(
    "callbacks_shared",
    schedule="@daily",
    start_date=datetime(2024, 1, 1),
    catchup=False,
    on_failure_callback=alert_oncall,
):
    PythonOperator(task_id="page_oncall", python_callable=alert_oncall)

    @task
    def announce_done(ds=None):
        post_to_slack(f"loads for {ds} are done")

    @task
    def build_summary(rows: list | None = None) -> dict:
        return {"rows": len(rows or [])}

    announce_done()
    build_summary()
