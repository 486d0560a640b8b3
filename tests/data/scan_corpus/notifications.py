import smtplib
from datetime import datetime
from email.message import EmailMessage

import requests
from airflow.providers.smtp.operators.smtp import EmailOperator
from airflow.sdk import DAG, task

with DAG("notifications", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
    EmailOperator(task_id="email_finance", to="finance@example.com", subject="Daily close {{ ds }}", html_content="done")

    @task
    def smtp_report(ds=None):
        msg = EmailMessage()
        msg["Subject"] = f"report {ds}"
        with smtplib.SMTP("mail.internal") as smtp:
            smtp.send_message(msg)

    @task
    def slack_alert():
        requests.post("https://hooks.slack.com/services/T000/B000/XXX", json={"text": "load done"})

    @task
    def build_summary(rows: int = 0) -> str:
        return f"{rows} rows loaded"

    smtp_report()
    slack_alert()
    build_summary()
