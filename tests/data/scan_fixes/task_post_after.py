from __future__ import annotations

import os
from datetime import datetime

import requests
from airflow.sdk import DAG, task

from airflow_crashsafe.effects import effect

VENDOR = os.environ.get("VENDOR_URL", "https://vendor.example.com")

with DAG("fix_task_post_after", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def push_invoice(ds=None, **context):
        body = {"vendor": "acme", "day": ds}
        with effect("push_invoice", payload=body, context=context) as fx:
            if fx.pending:
                headers = {"Idempotency-Key": fx.key}
                answer = requests.post(f"{VENDOR}/invoices", json=body, headers=headers, timeout=30)
                fx.done(answer.json())
        return fx.result

    push_invoice()
