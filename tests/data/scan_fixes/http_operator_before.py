from __future__ import annotations

from datetime import datetime

from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG

with DAG("fix_http_operator_before", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    HttpOperator(
        task_id="book_payout",
        http_conn_id="vendor",
        endpoint="/payments",
        method="POST",
        data='{"vendor": "acme", "amount_cents": 12500}',
        headers={"Content-Type": "application/json"},
    )
