"""The public test helpers' HTTP server and vendors answer real requests on 127.0.0.1."""

from __future__ import annotations

import requests

from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor, Reply, serve


def test_serve_records_requests_and_answer_swaps_the_reply() -> None:
    """Every request is recorded; answer() changes what later requests get; the URL outlives stop."""
    with serve(lambda request: Reply(201, {"path": request.path})) as server:
        first = requests.post(f"{server.url}/a", json={"n": 1}, timeout=5)
        server.answer(lambda request: Reply(503, "down"))
        second = requests.get(f"{server.url}/b", timeout=5)
    assert (first.status_code, first.json()) == (201, {"path": "/a"})
    assert (second.status_code, second.text) == (503, "down")
    assert [(r.method, r.path) for r in server.requests] == [("POST", "/a"), ("GET", "/b")]
    assert server.requests[0].json() == {"n": 1}
    assert server.url.startswith("http://127.0.0.1:")


def test_vendors_book_per_request_or_once_per_key() -> None:
    """The naive vendor books every delivery; the keyed one replays a repeated key and refuses GET."""
    key = {"Idempotency-Key": "k"}
    with NaiveVendor() as naive, KeyHonouringVendor() as keyed:
        for _ in range(2):
            requests.post(naive.url, json={"amount": 1}, timeout=5)
            replayed = requests.post(keyed.url, json={"amount": 1}, headers=key, timeout=5)
        conflict = requests.post(keyed.url, json={"amount": 2}, headers=key, timeout=5)
        unsupported = requests.get(keyed.url, timeout=5)
    assert (naive.bookings, keyed.bookings) == (2, 1)
    assert (replayed.status_code, replayed.json()["payment_id"]) == (201, "pay_1")
    assert conflict.status_code == 422
    assert unsupported.status_code == 501
    assert len(keyed.received) == 3
