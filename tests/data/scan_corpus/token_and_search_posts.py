"""Partner API sync: an OAuth token, searches and queries sent as POST, pings, and the real writes."""

from datetime import datetime

import requests
from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG, Variable, task

TOKEN_URL = "https://login.partner.example.com/oauth2/v2.0/token"
API = "https://api.partner.example.com/v3"
GRAPHQL = "https://api.github.example.com/graphql"

with DAG("token_and_search_posts", schedule="@hourly", start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def get_token() -> str:
        resp = requests.post(
            TOKEN_URL,
            data={
                "grant_type": "client_credentials",
                "client_id": Variable.get("partner_client_id"),
                "client_secret": Variable.get("partner_client_secret"),
                "scope": f"{API}/.default",
            },
            timeout=30,
        )
        resp.raise_for_status()
        return resp.json()["access_token"]

    @task
    def push_orders(token: str, ds=None):
        rows = requests.get(f"{API}/exports/orders", params={"day": ds}, timeout=60).json()
        resp = requests.post(
            f"{API}/orders/bulk",
            headers={"Authorization": f"Bearer {token}"},
            json=rows,
            timeout=60,
        )
        resp.raise_for_status()

    @task
    def search_tickets():
        body = {"query": {"bool": {"filter": [{"term": {"status": "open"}}]}}, "size": 100}
        return requests.post("https://search.internal:9200/tickets/_search", json=body, timeout=30).json()

    @task
    def list_open_issues(token: str):
        query = "query { repository(owner: \"acme\", name: \"etl\") { issues(states: OPEN) { totalCount } } }"
        return requests.post(GRAPHQL, json={"query": query}, headers={"Authorization": f"bearer {token}"}).json()

    @task
    def comment_on_release_issue(token: str, ds=None):
        mutation = f'mutation {{ addComment(input: {{subjectId: "I_1", body: "loaded {ds}"}}) {{ clientMutationId }} }}'
        requests.post(GRAPHQL, json={"query": mutation}, headers={"Authorization": f"bearer {token}"})

    @task
    def heartbeat():
        requests.post("https://hc-ping.com/5f6d1c2e-0b8e-4a5e-9d7c-2f1d1c0a9b11", timeout=10)

    fetch_partner_token = HttpOperator(
        task_id="fetch_partner_token",
        http_conn_id="partner_auth",
        endpoint="/oauth/token",
        method="POST",
        data={"grant_type": "client_credentials", "audience": "partner-api"},
        response_filter=lambda r: r.json()["access_token"],
    )
    HttpOperator(
        task_id="search_catalog",
        http_conn_id="partner_api",
        endpoint="/v3/catalog/search",
        method="POST",
        data='{"filter": {"updated_since": "{{ ds }}"}}',
        headers={"Content-Type": "application/json"},
    )
    HttpOperator(
        task_id="notify_partner_webhook",
        http_conn_id="partner_api",
        endpoint="/v3/webhooks/daily-ready",
        method="POST",
        data='{"day": "{{ ds }}"}',
        headers={"Content-Type": "application/json"},
    )

    token = get_token()
    push_orders(token)
    search_tickets()
    list_open_issues(token)
    comment_on_release_issue(token)
    heartbeat()
    fetch_partner_token
