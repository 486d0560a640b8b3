"""IdempotentHttpOperator's leaks, reproduced, and its unknown-outcome default, against real vendors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_crashsafe import redaction
from airflow_crashsafe.effects import effect
from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA
from airflow_crashsafe.errors import (
    ConfigurationError,
    ExternalCallFailed,
    IdempotencyConflict,
    OutcomeUnknown,
)
from airflow_crashsafe.store import ledger
from airflow_crashsafe.store.ledger import LedgerEntry
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor, fake_context
from airflow_crashsafe.testing.http import LocalServer, Reply
from tests.integration.effects.test_http_operator import ctx, push

pytestmark = pytest.mark.integration

SECRET = "s3cret-7f3a9"


def entries(store: Store) -> list[LedgerEntry]:
    with store.transaction() as db:
        return ledger.list_entries(db, dag_id="payouts")


@pytest.fixture
def token_vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalServer]:
    """A vendor that answers with credentials in its body, behind the connection ``vendor``."""
    reply = Reply(
        201, {"id": "t1", "refresh_token": SECRET, "x-api-key": SECRET}, headers={"X-Api-Key": SECRET}
    )
    with LocalServer(lambda request: reply) as server:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", server.url)
        yield server


def test_query_string_secret_is_neither_stored_nor_logged(
    store: Store, naive_vendor: NaiveVendor, capfd: pytest.CaptureFixture[str]
) -> None:
    """?api_key= in the endpoint reaches the vendor but not the ledger or the task log."""
    push(endpoint=f"/payments?api_key={SECRET}&page=3", safe_query_params=["page"]).execute(ctx())
    assert SECRET in naive_vendor.received[0].path
    (entry,) = entries(store)
    assert entry.request["endpoint"] == "/payments?page=3"
    assert "query_sha256" not in entry.request  # the only other parameter is a credential
    log = capfd.readouterr().out
    assert "POST /payments?page=3" in log
    assert SECRET not in log


def test_secret_json_field_and_form_bodies_are_stored_masked(store: Store, naive_vendor: NaiveVendor) -> None:
    """client_secret in JSON and in a form-encoded body are masked; the other fields are kept."""
    push(json={"client_secret": SECRET, "amount": 5}).execute(ctx())
    push(task_id="form", json=None, data=f"grant_type=client_credentials&client_secret={SECRET}").execute(
        fake_context(dag_id="payouts", task_id="form")
    )
    stored = {e.task_id: e.request for e in entries(store)}
    assert stored["push_payment"]["json"] == {"client_secret": "***", "amount": 5}
    assert stored["form"]["data"] == {"grant_type": "client_credentials", "client_secret": "***"}
    assert naive_vendor.received[1].body.decode().endswith(SECRET)


def test_vendor_credentials_in_the_response_reach_neither_ledger_nor_xcom(
    store: Store, token_vendor: LocalServer
) -> None:
    """refresh_token / x-api-key from the vendor are masked in the ledger, the XCom value and the replay."""
    returned = push().execute(ctx())
    assert returned["body"] == {"id": "t1", "refresh_token": "***", "x-api-key": "***"}
    (entry,) = entries(store)
    assert entry.result == returned
    assert push().execute(ctx(2)) == returned


def test_effect_exception_text_is_stored_redacted(store: Store) -> None:
    """An exception quoting a secret (by name, or a payload's secret bare) is stored without it."""
    context = fake_context(dag_id="payouts", task_id="notify")
    with pytest.raises(RuntimeError), effect("mail", context=context, payload={"password": SECRET}):
        raise RuntimeError(f"login failed: password={SECRET}, then {SECRET} again")
    (entry,) = entries(store)
    assert entry.error == "RuntimeError: login failed: password=***, then *** again"
    assert entry.request == {"payload": {"password": "***"}}


def test_a_raw_text_body_is_a_fingerprint_and_still_tells_payloads_apart(
    store: Store, naive_vendor: NaiveVendor
) -> None:
    """data='...' that is neither JSON nor a form is stored as its digest; a changed body conflicts."""
    body = f"PAY 125.50 EUR ref {SECRET}"
    push(json=None, data=body).execute(ctx())
    (entry,) = entries(store)
    assert entry.request["data"]["length"] == len(body)
    assert SECRET not in repr(entry.request)
    with pytest.raises(IdempotencyConflict):
        push(json=None, data=body.replace("125.50", "999.00")).execute(ctx(2))


def test_two_calls_differing_only_in_a_secret_are_the_same_call(
    store: Store, naive_vendor: NaiveVendor
) -> None:
    """A credential rotated between tries does not make the retry a conflicting payload."""
    push(json={"client_secret": "old-secret-1", "amount": 5}).execute(ctx())
    replayed = push(json={"client_secret": "new-secret-2", "amount": 5}).execute(ctx(2))
    assert replayed["status"] == 201
    assert len(naive_vendor.received) == 1


def test_undeclared_target_is_never_re_sent_and_the_error_says_how_to_declare(
    store: Store, naive_vendor: NaiveVendor
) -> None:
    """Undeclared (no target_honours_keys, no connection extra): an unknown outcome stops the task."""
    naive_vendor.scripted_statuses = [504]
    with pytest.raises(ExternalCallFailed, match="target_honours_keys=True"):
        push(max_sends=3).execute(ctx(1))
    with pytest.raises(OutcomeUnknown, match=HONOURS_KEYS_EXTRA):
        push(max_sends=3).execute(ctx(2))
    assert len(naive_vendor.received) == 1
    assert naive_vendor.bookings == 0


def test_the_connection_declaration_is_never_sent_as_a_header(
    store: Store, honouring_vendor: KeyHonouringVendor
) -> None:
    """HttpHook turns extras into headers; the crashsafe declaration is taken out before sending."""
    honouring_vendor.scripted_statuses = [503]
    push().execute(ctx())  # declared by the connection: the 503 is re-sent with the same key
    assert len(honouring_vendor.received) == 2
    sent = {name.lower() for r in honouring_vendor.received for name in r.headers}
    assert HONOURS_KEYS_EXTRA not in sent


def test_resend_against_a_connection_declared_naive_fails_before_intent(
    store: Store, naive_vendor: NaiveVendor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'resend' to a connection that says its target ignores keys is refused; nothing is recorded."""
    monkeypatch.setenv("AIRFLOW_CONN_VENDOR", f"{naive_vendor.url}?{HONOURS_KEYS_EXTRA}=false")
    with pytest.raises(ConfigurationError, match="contradicts the connection's extra"):
        push(on_unknown_outcome="resend").execute(ctx())
    assert naive_vendor.received == []
    assert entries(store) == []


def test_a_random_id_masked_in_the_path_still_tells_payloads_apart(
    store: Store, naive_vendor: NaiveVendor
) -> None:
    """Two calls that differ only in an id masked for reading as random conflict; nothing is re-sent."""
    first, second = (
        "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms",
        "9ZyxWVu8TSR7qPOnmLKjIhGfEdCbA6543210zyxwvu",
    )
    push(endpoint=f"/files/{first}/pay").execute(ctx())
    (entry,) = entries(store)
    assert entry.request["endpoint"] == "/files/***/pay"
    assert first not in repr(entry.request)
    with pytest.raises(IdempotencyConflict):
        push(endpoint=f"/files/{second}/pay").execute(ctx(2))
    assert len(naive_vendor.received) == 1


def test_a_rotated_token_in_the_path_is_the_same_call(store: Store, naive_vendor: NaiveVendor) -> None:
    """A bot token rotated between tries is a credential, not the payload: the retry replays."""
    push(endpoint="/bot4839574813:AAFD39kkdpWt3ywyRZergyOLMaJhac61qc/sendMessage").execute(ctx())
    replayed = push(endpoint="/bot4839574813:AAE4A6Rz0CSnIGzeu897OjQnjzsMEG2_uso/sendMessage").execute(ctx(2))
    assert replayed["status"] == 201
    assert len(naive_vendor.received) == 1
    (entry,) = entries(store)
    assert entry.request["endpoint"] == "/bot***/sendMessage"


def test_json_secrets_named_in_any_case_style_are_stored_masked(
    store: Store, naive_vendor: NaiveVendor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pwd, jwt, connectionString's AccountKey and webhookUrl's path secret never reach the store."""
    # Proven by the policy alone: what the calls register with Airflow's masker is not consulted.
    monkeypatch.setattr(redaction, "_airflow_masked", lambda text: text)
    body = {
        "pwd": SECRET,
        "jwt": f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.{SECRET}",
        "connectionString": f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={SECRET}xYz==;",
        "webhookUrl": f"https://hooks.slack.com/services/T000/B000/{SECRET}",
        "amount": 5,
    }
    push(json=body).execute(ctx())
    (entry,) = entries(store)
    assert SECRET not in repr(entry.request)
    assert entry.request["json"]["amount"] == 5
    assert SECRET in naive_vendor.received[0].body.decode()
