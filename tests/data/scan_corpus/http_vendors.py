import json
from datetime import datetime

from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG

with DAG("http_vendors", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    HttpOperator(
        task_id="post_invoice",
        http_conn_id="billing_api",
        endpoint="/v1/invoices",
        method="POST",
        data=json.dumps({"day": "{{ ds }}"}),
        headers={"Content-Type": "application/json"},
    )
    HttpOperator(task_id="fetch_rates", http_conn_id="fx_api", endpoint="/rates?day={{ ds }}", method="GET")
    HttpOperator(
        task_id="post_payout_keyed",
        http_conn_id="payouts_api",
        endpoint="/payouts",
        method="POST",
        data=json.dumps({"day": "{{ ds }}"}),
        headers={"Idempotency-Key": "payout-{{ run_id }}-{{ task.task_id }}"},
    )
    HttpOperator(
        task_id="put_profile_attempt_key",
        http_conn_id="crm_api",
        endpoint="/profiles/sync",
        method="PUT",
        headers={"Idempotency-Key": "{{ ti.id }}"},
    )
    HttpOperator(task_id="delete_old_exports", http_conn_id="crm_api", endpoint="/exports/{{ ds }}", method="DELETE")
    HttpOperator(
        task_id="post_with_crashsafe_macro",
        http_conn_id="payouts_api",
        endpoint="/payouts",
        method="POST",
        headers={"Idempotency-Key": "{{ macros.crashsafe.idempotency_key('payouts') }}"},
    )
    HttpOperator(task_id="trigger_webhook", http_conn_id="partner_hook", endpoint="/hooks/daily-ready")
