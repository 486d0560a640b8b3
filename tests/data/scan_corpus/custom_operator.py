from datetime import datetime

import requests
from airflow.sdk import DAG, BaseOperator


class PushToCrmOperator(BaseOperator):
    """Our team's operator: pushes the day's leads to the CRM."""

    def __init__(self, *, endpoint: str, **kwargs):
        super().__init__(**kwargs)
        self.endpoint = endpoint

    def execute(self, context):
        requests.post(self.endpoint, json={"day": context["ds"]}, timeout=60)


class LogRunOperator(BaseOperator):
    def execute(self, context):
        self.log.info("run %s", context["run_id"])
        return context["ds"]


with DAG("custom_operator", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    PushToCrmOperator(task_id="push_leads", endpoint="https://crm.example.com/leads")
    LogRunOperator(task_id="log_run")
