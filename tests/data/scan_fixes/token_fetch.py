from __future__ import annotations

import os
from datetime import datetime

import requests
from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG, task

TOKEN_URL = os.environ.get("TOKEN_URL", "https://login.example.com/oauth2/v2.0/token")

with DAG("fix_token_fetch", schedule="@hourly", start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def get_token() -> str:
        body = {"grant_type": "client_credentials", "client_id": "etl"}
        answer = requests.post(TOKEN_URL, data=body, timeout=30)
        return answer.json()["access_token"]

    @task
    def use_token(token: str) -> int:
        return len(token)

    HttpOperator(
        task_id="fetch_token_operator",
        http_conn_id="auth",
        endpoint="/oauth/token",
        method="POST",
        data={"grant_type": "client_credentials"},
    )
    use_token(get_token())
