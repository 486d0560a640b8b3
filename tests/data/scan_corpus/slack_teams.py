from datetime import datetime

import requests
from airflow.sdk import dag, task


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def slack_teams():
    @task
    def slack_sdk_post():
        from slack_sdk import WebClient

        WebClient(token="xoxb").chat_postMessage(channel="#data", text="done")

    @task
    def teams_post():
        requests.post("https://outlook.office.com/webhook/abc", json={"text": "done"}, timeout=10)

    @task
    def format_message(n: int = 3) -> str:
        return f":white_check_mark: {n} tables"

    slack_sdk_post()
    teams_post()
    format_message()


slack_teams()
