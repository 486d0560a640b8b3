from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from airflow_crashsafe.operators.http import IdempotentHttpOperator

with DAG("fix_http_operator_after", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    IdempotentHttpOperator(task_id='book_payout', http_conn_id='vendor', endpoint='/payments', method='POST', data='{"vendor": "acme", "amount_cents": 12500}', headers={'Content-Type': 'application/json'}, target_honours_keys=False)  # noqa: E501  # fmt: skip
