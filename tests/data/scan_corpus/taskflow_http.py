from datetime import datetime

import httpx
import requests
from airflow.sdk import dag, task

API = "https://api.partner.example.com"


@dag(schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False)
def taskflow_http():
    @task
    def push_orders(ds=None):
        resp = requests.post(f"{API}/orders/bulk", json={"day": ds}, timeout=30)
        resp.raise_for_status()

    @task
    def get_catalog():
        return requests.get(f"{API}/catalog", timeout=30).json()

    @task
    def push_keyed(ds=None, run_id=None):
        with httpx.Client() as client:
            client.post(f"{API}/settlements", json={"day": ds}, headers={"Idempotency-Key": f"settle-{run_id}"})

    @task
    def update_profile():
        session = requests.Session()
        session.put(f"{API}/profile", json={"active": True})

    @task
    def ping_partner_urllib(ds=None):
        import urllib.request

        req = urllib.request.Request(f"{API}/ready", data=b"{}", method="POST")
        urllib.request.urlopen(req)

    push_orders()
    get_catalog()
    push_keyed()
    update_profile()
    ping_partner_urllib()


taskflow_http()
