"""IdempotentHttpOperator against real local vendors and a real crashsafe store."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.errors import ExternalCallFailed, FencedOut, IdempotencyConflict, OutcomeUnknown
from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor, fake_context

pytestmark = pytest.mark.integration


def push(**overrides: Any) -> IdempotentHttpOperator:
    arguments: dict[str, Any] = {
        "task_id": "push_payment",
        "http_conn_id": "vendor",
        "endpoint": "/payments",
        "json": {"vendor": "acme", "amount_cents": 12_500},
        "max_sends": 3,
        "timeout": 5,
        "backoff_base": 0.01,
    }
    return IdempotentHttpOperator(**(arguments | overrides))


def ctx(try_number: int = 1, **kw: Any) -> dict[str, Any]:
    return fake_context(dag_id="payouts", task_id="push_payment", try_number=try_number, **kw)


@pytest.mark.floor  # the floor subset's ledgered call
def test_retry_after_success_replays_without_sending(store: Store, naive_vendor: NaiveVendor) -> None:
    """A retry of a recorded success sends nothing and returns the same result."""
    first = push().execute(ctx(1))
    second = push().execute(ctx(2))
    assert second == first
    assert naive_vendor.bookings == 1
    assert len(naive_vendor.received) == 1


def test_key_header_is_stable_across_tries_and_clears(
    store: Store, honouring_vendor: KeyHonouringVendor
) -> None:
    """The request carries the same Idempotency-Key in every attempt, also after a clear."""
    honouring_vendor.scripted_statuses = [503]
    with pytest.raises(ExternalCallFailed):
        push(max_sends=1).execute(ctx(1))
    push().execute(ctx(2, clear_number=1))
    keys = {r.headers["Idempotency-Key"] for r in honouring_vendor.received}
    assert len(keys) == 1
    assert honouring_vendor.bookings == 1


def test_changed_payload_is_a_conflict_and_not_sent(store: Store, naive_vendor: NaiveVendor) -> None:
    """The same key with a different payload raises IdempotencyConflict and sends nothing."""
    push().execute(ctx(1))
    with pytest.raises(IdempotencyConflict, match="different payload"):
        push(json={"vendor": "acme", "amount_cents": 99_999}).execute(ctx(2))
    assert len(naive_vendor.received) == 1


def test_version_bump_sends_again_under_a_new_key(store: Store, honouring_vendor: KeyHonouringVendor) -> None:
    """Bumping version= deliberately sends again, under a different key."""
    push().execute(ctx(1))
    push(version=2, json={"vendor": "acme", "amount_cents": 1}).execute(ctx(2))
    assert honouring_vendor.bookings == 2
    assert len({r.headers["Idempotency-Key"] for r in honouring_vendor.received}) == 2


def test_vendor_422_is_a_conflict_without_retry(store: Store, honouring_vendor: KeyHonouringVendor) -> None:
    """A 422 from the vendor is recorded as a conflict and never retried."""
    honouring_vendor.scripted_statuses = [422]
    with pytest.raises(IdempotencyConflict):
        push().execute(ctx(1))
    assert len(honouring_vendor.received) == 1
    with pytest.raises(IdempotencyConflict):
        push().execute(ctx(2))
    assert len(honouring_vendor.received) == 1


def test_vendor_4xx_fails_for_good_without_retry(store: Store, naive_vendor: NaiveVendor) -> None:
    """A 400 fails the attempt at once; the next try may send again because nothing was booked."""
    naive_vendor.scripted_statuses = [400]
    with pytest.raises(ExternalCallFailed, match="refused"):
        push().execute(ctx(1))
    assert len(naive_vendor.received) == 1
    push().execute(ctx(2))
    assert naive_vendor.bookings == 1


def test_5xx_is_retried_with_the_same_key_then_outcome_unknown(
    store: Store, honouring_vendor: KeyHonouringVendor
) -> None:
    """5xx answers are retried (bounded) with one key; exhausted retries record an unknown outcome."""
    honouring_vendor.scripted_statuses = [500, 502, 503]
    with pytest.raises(ExternalCallFailed) as raised:
        push(max_sends=3).execute(ctx(1))
    assert raised.value.outcome_unknown
    assert len(honouring_vendor.received) == 3
    assert len({r.headers["Idempotency-Key"] for r in honouring_vendor.received}) == 1
    honouring_vendor.scripted_statuses = [500]
    push(max_sends=3).execute(ctx(2))
    assert honouring_vendor.bookings == 1


def test_409_in_progress_is_awaited_within_the_attempt(
    store: Store, honouring_vendor: KeyHonouringVendor
) -> None:
    """While the vendor answers 409 the operator waits and asks again, then returns the result."""
    honouring_vendor.scripted_statuses = [409, 409]
    result = push(in_progress_wait=10).execute(ctx(1))
    assert result["status"] == 201
    assert len(honouring_vendor.received) == 3
    assert honouring_vendor.bookings == 1


def test_unknown_outcome_fail_policy_sends_nothing(store: Store, naive_vendor: NaiveVendor) -> None:
    """With on_unknown_outcome='fail' a retry after an unknown outcome raises and sends nothing."""
    naive_vendor.scripted_statuses = [504]
    with pytest.raises(ExternalCallFailed):
        push(max_sends=1, on_unknown_outcome="fail").execute(ctx(1))
    with pytest.raises(OutcomeUnknown, match="ledger resolve"):
        push(on_unknown_outcome="fail").execute(ctx(2))
    assert len(naive_vendor.received) == 1


def test_stale_attempt_is_refused_before_it_sends(store: Store, naive_vendor: NaiveVendor) -> None:
    """An older try starting after a newer one holds the slot sends nothing."""
    push().execute(ctx(3))
    with pytest.raises(FencedOut, match="Nothing was sent"):
        push(json={"vendor": "acme", "amount_cents": 12_500}).execute(ctx(2))
    assert len(naive_vendor.received) == 1


def test_overlapping_attempts_book_once_with_a_key_honouring_vendor(store: Store) -> None:
    """A zombie still waiting for the vendor and its reset re-run book one payment between them."""
    with KeyHonouringVendor(processing_seconds=1.0) as vendor:
        import os

        os.environ["AIRFLOW_CONN_VENDOR"] = vendor.url
        try:
            results: dict[int, Any] = {}

            def attempt(try_number: int) -> None:
                try:
                    results[try_number] = push(in_progress_wait=10, target_honours_keys=True).execute(
                        ctx(try_number)
                    )
                except Exception as exc:  # the zombie may be fenced out when it records
                    results[try_number] = exc

            zombie = threading.Thread(target=attempt, args=(1,))
            zombie.start()
            time.sleep(0.3)
            attempt(2)
            zombie.join(10)
        finally:
            del os.environ["AIRFLOW_CONN_VENDOR"]
        assert vendor.bookings == 1
        assert results[2]["body"]["payment_id"] == "pay_1"


def test_secrets_never_reach_store_or_result(
    store: Store,
    naive_vendor: NaiveVendor,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Any,
) -> None:
    """Authorization headers, connection passwords and redacted body fields are stored nowhere."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_VENDOR", naive_vendor.url.replace("http://", "http://svc:conn-pa55word@")
    )
    caplog.set_level("DEBUG")
    result = push(
        headers={"X-Api-Key": "header-s3cret"},
        json={"amount_cents": 1, "card_number": "4111111111111111"},
        redact_fields=["card_number"],
    ).execute(ctx(1))
    assert naive_vendor.received[0].headers["X-Api-Key"] == "header-s3cret"
    dump = repr(store.events()) + repr(result) + caplog.text
    from airflow_crashsafe.store import ledger

    with store.transaction() as db:
        dump += repr(ledger.list_entries(db))
    store_file = Path(store.location)
    if store_file.is_file():  # the embedded store: grep its raw bytes (and WAL) too
        for path in store_file.parent.glob(store_file.name + "*"):
            dump += path.read_bytes().decode("latin-1")
    for secret in ("header-s3cret", "conn-pa55word", "4111111111111111"):
        assert secret not in dump


def test_fail_policy_never_resends_an_ambiguous_answer_within_the_attempt(
    store: Store, naive_vendor: NaiveVendor
) -> None:
    """With on_unknown_outcome='fail', a 503 is not re-sent: a key-ignoring vendor may have acted."""
    naive_vendor.scripted_statuses = [503]
    with pytest.raises(ExternalCallFailed) as raised:
        push(max_sends=3, on_unknown_outcome="fail").execute(ctx(1))
    assert raised.value.outcome_unknown
    assert len(naive_vendor.received) == 1


def test_fail_policy_still_retries_a_refused_connection(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that was refused never delivered the request, so it is retried even with 'fail'."""
    import socket

    from airflow_crashsafe.store import ledger

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before the operator connects: refused
    monkeypatch.setenv("AIRFLOW_CONN_VENDOR", f"http://127.0.0.1:{port}")
    with pytest.raises(ExternalCallFailed):
        push(max_sends=3, on_unknown_outcome="fail").execute(ctx(1))
    with store.transaction() as db:
        (entry,) = ledger.list_entries(db)
    assert entry.send_count == 3


def test_a_missing_connection_fails_before_any_intent_is_recorded(
    store: Store, naive_vendor: NaiveVendor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task whose HTTP connection does not exist records nothing, so its retry is not 'unknown'."""
    from airflow_crashsafe.effects.keys import idempotency_key
    from airflow_crashsafe.store import ledger

    with pytest.raises(Exception, match="no_such_vendor"):
        push(http_conn_id="no_such_vendor", on_unknown_outcome="fail").execute(ctx(1))
    key = idempotency_key("push_payment", context=ctx(1))
    with store.transaction() as db:
        assert ledger.get_entry(db, key) is None
    # The retry, with the connection fixed, sends once even under on_unknown_outcome="fail".
    push(on_unknown_outcome="fail").execute(ctx(2))
    assert naive_vendor.bookings == 1
