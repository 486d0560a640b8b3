"""POSTs that only read (tokens, searches, queries, pings) are safe; keys made per attempt are no keys."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from airflow_crashsafe.scan.http_reads import read_only_post
from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.python_code import analyze_callable
from airflow_crashsafe.scan.rules import classify_task

RUN = ["2031-07-14"]


@pytest.mark.parametrize(
    ("url", "body", "reads"),
    [
        ("https://login.microsoftonline.com/t/oauth2/v2.0/token", "", True),
        ("https://auth.example.com/realms/x/protocol/openid-connect/token", "", True),
        ("/api/session", "{'grant_type': 'password'}", True),
        ("https://es.internal:9200/orders-*/_search", "", True),
        ("https://api.example.com/v2/search", "", True),
        ("https://api.github.com/graphql", "query { viewer { login } }", True),
        ("https://api.github.com/graphql", "mutation { addStar(input: {}) { clientMutationId } }", False),
        ("https://api.github.com/graphql", "", False),
        ("https://hc-ping.com/5f6d1c2e", "", True),
        ("https://status.example.com/api/heartbeat", "", True),
        ("https://api.example.com/v1/payments", "", False),
        ("https://api.example.com/orders/123/status", "", False),
        ("https://api.example.com/auth/users", "", False),
    ],
)
def test_read_only_post(url: str, body: str, reads: bool) -> None:
    """Token endpoints and grant_type bodies, searches, GraphQL queries and pings read; the rest may write."""
    assert (read_only_post(url, body) is not None) is reads


def _token() -> str:
    import requests

    answer = requests.post(
        "https://login.example.com/oauth2/token",
        data={"grant_type": "client_credentials", "client_id": "etl"},
        timeout=30,
    )
    return answer.json()["access_token"]


def _search() -> dict:
    import requests

    body = {"query": {"term": {"status": "open"}}}
    return requests.post("https://es.internal:9200/tickets/_search", json=body, timeout=30).json()


def _graphql_mutation(token: str) -> None:
    import requests

    mutation = 'mutation { addComment(input: {subjectId: "I_1", body: "done"}) { clientMutationId } }'
    requests.post("https://api.github.com/graphql", json={"query": mutation}, timeout=30)


def _key_per_attempt(run_id: str, ti: Any) -> None:
    import requests

    key = f"refunds-{run_id}-{ti.try_number}"
    requests.post("https://pay.example.com/v1/refunds", json={}, headers={"Idempotency-Key": key}, timeout=30)


CASES: list[tuple[Callable[..., Any], str, str]] = [
    (_token, "safe", "http_read"),
    (_search, "safe", "http_read"),
    (_graphql_mutation, "risky", "http_mutating"),
    (_key_per_attempt, "risky", "http_mutating"),
]


@pytest.mark.parametrize(("fn", "verdict", "category"), CASES, ids=[c[0].__name__ for c in CASES])
def test_posts_in_callables(fn: Callable[..., Any], verdict: str, category: str) -> None:
    """In Python: a token request and a search are reads; a mutation and a per-attempt key are not."""
    found = combine(analyze_callable(fn, markers=RUN))
    assert (found.verdict, found.category) == (verdict, category)
    assert (found.fix == "") is (verdict == "safe")


def _operator(**kwargs: Any) -> tuple[Any, Any]:
    from airflow.providers.http.operators.http import HttpOperator
    from airflow.sdk import DAG

    with DAG("http_reads", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        task = HttpOperator(task_id="call", http_conn_id="vendor", method="POST", **kwargs)
    return task, dag


@pytest.mark.parametrize(
    ("kwargs", "verdict", "category"),
    [
        ({"endpoint": "/oauth/token", "data": {"grant_type": "client_credentials"}}, "safe", "http_read"),
        ({"endpoint": "/v3/catalog/search", "data": "{}"}, "safe", "http_read"),
        (
            {"endpoint": "/v1/payouts", "headers": {"Idempotency-Key": "p-{{ ds }}-{{ ti.try_number }}"}},
            "risky",
            "http_mutating",
        ),
        ({"endpoint": "/v1/payouts", "headers": {"Idempotency-Key": "p-{{ run_id }}"}}, "safe", "http_keyed"),
        (
            {"endpoint": "/v1/payouts", "headers": {"Idempotency-Key": "p-{{ ti.id }}"}},
            "risky",
            "http_mutating",
        ),
    ],
)
def test_http_operator(kwargs: dict[str, Any], verdict: str, category: str) -> None:
    """HttpOperator: read-only POSTs are safe; a key templated with the try number changes every attempt."""
    task, dag = _operator(**kwargs)
    found = classify_task(task, dag)
    assert (found.verdict, found.category) == (verdict, category)


def test_http_operator_fix_is_the_task_itself() -> None:
    """The fix is an IdempotentHttpOperator with this task's id, connection, endpoint and body."""
    task, dag = _operator(endpoint="/v1/payouts", data='{"day": "{{ ds }}"}')
    fix = classify_task(task, dag).fix
    assert fix.startswith(
        "IdempotentHttpOperator(task_id='call', http_conn_id='vendor', endpoint='/v1/payouts', "
        "method='POST', "
        'data=\'{"day": "{{ ds }}"}\', target_honours_keys=False)'
    )
