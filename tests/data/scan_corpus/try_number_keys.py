"""Payouts and refunds sent with idempotency keys, some made per attempt by mistake."""

from datetime import datetime

import requests
from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG, get_current_context, task

with DAG("try_number_keys", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    HttpOperator(
        task_id="send_payouts_try_key",
        http_conn_id="payments",
        endpoint="/v1/payouts",
        method="POST",
        data='{"day": "{{ ds }}"}',
        headers={"Idempotency-Key": "payouts-{{ ds }}-{{ ti.try_number }}", "Content-Type": "application/json"},
    )
    HttpOperator(
        task_id="send_payouts_run_key",
        http_conn_id="payments",
        endpoint="/v1/payouts",
        method="POST",
        data='{"day": "{{ ds }}"}',
        headers={"Idempotency-Key": "payouts-{{ run_id }}", "Content-Type": "application/json"},
    )

    @task
    def send_refunds(ds=None, run_id=None):
        ti = get_current_context()["ti"]
        key = f"refunds-{run_id}-{ti.try_number}"
        requests.post("https://payments.example.com/v1/refunds", json={"day": ds}, headers={"Idempotency-Key": key})

    @task
    def send_credits(ds=None, run_id=None):
        requests.post(
            "https://payments.example.com/v1/credits",
            json={"day": ds},
            headers={"Idempotency-Key": f"credits-{run_id}"},
        )

    send_refunds()
    send_credits()
