from __future__ import annotations

import os
from datetime import datetime

import requests
from airflow.sdk import DAG, task

VENDOR = os.environ.get("VENDOR_URL", "https://vendor.example.com")

with DAG("fix_task_post_before", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def push_invoice(ds=None):
        body = {"vendor": "acme", "day": ds}
        return requests.post(f"{VENDOR}/invoices", json=body, timeout=30).json()

    push_invoice()
