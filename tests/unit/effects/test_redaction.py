"""The one redaction policy: what it masks, what it keeps, and what it stores of opaque bodies."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from urllib.parse import quote

import pytest

from airflow_crashsafe.redaction import (
    DEFAULT_POLICY,
    MASK,
    MAX_TEXT,
    RedactionPolicy,
    auth_secrets,
    body_fingerprint,
)
from airflow_crashsafe.ui.redact import redact

SECRET = "s3cret-value-1"


@pytest.mark.parametrize(
    "key",
    [
        "client_secret",
        "refresh_token",
        "x-api-key",
        "X-Api-Key",
        "Authorization",
        "password",
        "access_key",
        "webhook_url",
        "session_cookie",
        "private_key",
        "dsn",
        "credentials",
        "signature",
    ],
)
def test_secret_named_keys_are_masked_at_any_depth(key: str) -> None:
    """Airflow's sensitive field names and the UI's patterns mask a key however deep it nests."""
    value = {"outer": [{"inner": {key: SECRET}}]}
    assert DEFAULT_POLICY.value(value) == {"outer": [{"inner": {key: MASK}}]}


def test_numbers_booleans_and_ordinary_keys_are_kept() -> None:
    """Fencing tokens, counters like max_tokens and fields like author are not secrets."""
    value = {"newest_token": 7, "max_tokens": 100, "private": True, "author": "ann", "amount": "5.00"}
    assert DEFAULT_POLICY.value(value) == value


def test_fields_the_user_names_are_masked_too() -> None:
    """redact_fields adds exact names (any case) to the policy."""
    policy = RedactionPolicy.of(["Card_Number"])
    assert policy.value({"card_number": "4111", "card_type": "visa"}) == {
        "card_number": MASK,
        "card_type": "visa",
    }


def test_text_masks_pairs_credentials_urls_and_cuts() -> None:
    """Free text loses secret name=value pairs, Bearer tokens, URL passwords and query strings."""
    text = (
        f"client_secret={SECRET}; 'refresh_token': '{SECRET}' Authorization: Bearer {SECRET} "
        f"https://svc:{SECRET}@api.example.com/x?sig={SECRET}&page=1 page=2"
    )
    scrubbed = DEFAULT_POLICY.text(text)
    assert SECRET not in scrubbed
    assert "page=2" in scrubbed
    assert "https://svc:***@api.example.com/x?***" in scrubbed
    assert DEFAULT_POLICY.text("x" * (MAX_TEXT + 10)).endswith("…")


def test_known_secrets_are_scrubbed_from_any_text() -> None:
    """A value the policy masked once is masked wherever it is quoted, even bare."""
    policy = DEFAULT_POLICY.knowing({"payload": {"password": SECRET, "to": "ops@example.com"}})
    assert policy.text(f"login refused for {SECRET}") == f"login refused for {MASK}"
    assert policy.text("mail to ops@example.com") == "mail to ops@example.com"
    assert DEFAULT_POLICY.knowing({"token": "abc"}).known_secrets == frozenset()  # too short to scrub


def test_endpoint_query_is_stripped_but_safe_parameters_kept() -> None:
    """The query string leaves the endpoint except parameters named safe; a password in it too."""
    policy = RedactionPolicy.of(safe_query_params=["page"])
    assert policy.endpoint(f"/v1/pay?api_key={SECRET}&page=2&amount=5") == "/v1/pay?page=2"
    assert policy.endpoint("/v1/pay") == "/v1/pay"
    assert policy.endpoint(f"https://u:{SECRET}@h/p?x=1") == "https://h/p"


def test_query_digest_counts_payload_parameters_but_not_credentials() -> None:
    """A changed amount changes the digest; a rotated api_key does not; safe ones are in the endpoint."""
    policy = RedactionPolicy.of(safe_query_params=["page"])
    base = policy.query_digest("/p?api_key=old&amount=5&page=1")
    assert base == policy.query_digest("/p?api_key=new&amount=5&page=2")
    assert base != policy.query_digest("/p?api_key=old&amount=6&page=1")
    assert policy.query_digest("/p?api_key=old&page=1") is None


@pytest.mark.parametrize(
    ("body", "stored"),
    [
        ({"client_secret": SECRET, "n": 1}, {"client_secret": MASK, "n": 1}),
        (f"grant_type=refresh&client_secret={SECRET}", {"grant_type": "refresh", "client_secret": MASK}),
        (f'{{"password": "{SECRET}"}}'.encode(), {"password": MASK}),
        ([("client_secret", SECRET), ("a", "1"), ("a", "2")], {"client_secret": MASK, "a": ["1", "2"]}),
        (None, None),
    ],
)
def test_json_and_form_bodies_are_stored_redacted(body: object, stored: object) -> None:
    """JSON (text or bytes), form text and form pairs keep their fields, secrets masked."""
    assert DEFAULT_POLICY.body(body) == stored


def test_an_unlisted_text_body_is_stored_as_its_fingerprint() -> None:
    """A body that is neither JSON nor a form is kept only as its SHA-256 and length."""
    body = f"please pay; my password is {SECRET}"
    assert DEFAULT_POLICY.body(body) == {
        "body_sha256": hashlib.sha256(body.encode()).hexdigest(),
        "length": len(body),
    }
    assert DEFAULT_POLICY.body(b"\xff\xfe") == body_fingerprint(b"\xff\xfe")
    assert DEFAULT_POLICY.body(iter([b"x"])) == {"body_type": "list_iterator"}


def test_a_text_response_keeps_its_text_without_the_secrets() -> None:
    """An OAuth-style form response stays text, its tokens masked."""
    assert (
        DEFAULT_POLICY.response(f"access_token={SECRET}&expires_in=3600")
        == "access_token=***&expires_in=3600"
    )


def test_a_request_stored_in_clear_is_made_safe_to_show() -> None:
    """Rows from before the policy: the endpoint's query and the secret fields go."""
    shown = DEFAULT_POLICY.request_record({"endpoint": f"/p?api_key={SECRET}", "json": {"token": SECRET}})
    assert shown == {"endpoint": "/p", "json": {"token": MASK}}


def test_the_ui_applies_the_same_policy() -> None:
    """The UI's redact is the policy: secret keys, credentials in text."""
    assert redact({"result": {"refresh_token": SECRET}, "error": f"Bearer {SECRET}"}) == {
        "result": {"refresh_token": MASK},
        "error": f"Bearer {MASK}",
    }


@pytest.mark.parametrize(
    "setup",
    ["sys.modules['airflow'] = None", "pass"],
    ids=["airflow absent", "airflow installed, not imported"],
)
def test_the_policy_masks_without_importing_airflow(setup: str) -> None:
    """Without Airflow, or before anything imported it (the watchdog), the policy masks and imports none."""
    code = (
        f"import sys; {setup}\n"
        "from airflow_crashsafe.redaction import DEFAULT_POLICY\n"
        "assert DEFAULT_POLICY.value({'x-api-key': 'v'}) == {'x-api-key': '***'}\n"
        "assert DEFAULT_POLICY.text('token=abc') == 'token=***'\n"
        "assert DEFAULT_POLICY.text('Bearer abc https://u:p@h/bot1:AAx/y?a=1').count('***') == 3\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'airflow' and sys.modules[m]]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_copy_of_the_sensitive_names_matches_airflows() -> None:
    """The fallback set is Airflow 3.3's DEFAULT_SENSITIVE_FIELDS (or a superset of it)."""
    from airflow.sdk._shared.secrets_masker import DEFAULT_SENSITIVE_FIELDS

    from airflow_crashsafe.redaction import SENSITIVE_FIELDS

    assert DEFAULT_SENSITIVE_FIELDS <= SENSITIVE_FIELDS


def test_a_credential_after_its_scheme_is_known_on_its_own() -> None:
    """An Authorization header's token is scrubbed from text even when quoted without 'Bearer'."""
    policy = DEFAULT_POLICY.knowing({"Authorization": f"Bearer {SECRET}"})
    assert policy.text(f"token {SECRET} expired") == f"token {MASK} expired"


def test_basic_and_encoded_credentials_are_masked_in_error_texts() -> None:
    """Basic credentials in free text, and a base64- or URL-encoded secret pair, leave no trace."""
    credential = base64.b64encode(b"user:pw").decode()
    assert DEFAULT_POLICY.text(f"407 from gateway: Basic {credential}") == f"407 from gateway: Basic {MASK}"
    assert credential not in DEFAULT_POLICY.text(f"Authorization: Basic {credential}")
    pair = base64.b64encode(f"password={SECRET}".encode()).decode()
    assert DEFAULT_POLICY.text(f"state={pair}") == f"state={MASK}"
    encoded = quote(f"client_secret={SECRET}&a=1", safe="")
    assert quote(SECRET, safe="") not in DEFAULT_POLICY.text(f"body {encoded}")


def test_a_known_secret_is_scrubbed_in_its_encoded_forms() -> None:
    """A payload secret quoted URL-encoded or inside base64 (an echoed Basic header) is masked."""
    policy = DEFAULT_POLICY.knowing({"password": "p@ss/w0rd+x"})
    echoed = base64.b64encode(b"svc:p@ss/w0rd+x").decode()
    assert policy.text(f"got {quote('p@ss/w0rd+x', safe='')} and {echoed}") == f"got {MASK} and {MASK}"


def test_the_session_credentials_are_known_secrets() -> None:
    """auth_secrets gives the login's password and its Basic credential, for a tuple or an auth object."""
    from requests.auth import HTTPBasicAuth

    expected = {
        "password": SECRET,
        "authorization": "Basic " + base64.b64encode(f"svc:{SECRET}".encode()).decode(),
    }
    assert auth_secrets(("svc", SECRET)) == expected
    assert auth_secrets(HTTPBasicAuth("svc", SECRET)) == expected
    assert auth_secrets(None) == {}
    policy = DEFAULT_POLICY.knowing(auth_secrets(("svc", SECRET)))
    assert policy.text(expected["authorization"].split()[1]) == MASK


def test_tokens_in_an_endpoint_path_become_known_secrets() -> None:
    """knowing(urls=...) learns the bot token of /bot<token>/ and the secret query values."""
    token = "4839574813:AAFD39kkdpWt3ywyRZergyOLMaJhac61qc"
    policy = DEFAULT_POLICY.knowing(urls=[f"/bot{token}/sendMessage?api_key={SECRET}&page=1"])
    assert {token, SECRET} <= policy.known_secrets
    shown = policy.text(f"urllib3: POST /bot{quote(token)}/x")
    assert MASK in shown
    assert token not in shown
    assert quote(token) not in shown


def test_opaque_path_segments_count_toward_the_fingerprint_and_credentials_do_not() -> None:
    """Different random ids in a path differ; a bot token and a plain path add nothing."""
    policy = RedactionPolicy.of()
    one = policy.opaque_digest(endpoint="/files/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms")
    other = policy.opaque_digest(endpoint="/files/9ZyxWVu8TSR7qPOnmLKjIhGfEdCbA6543210zyxwvu")
    assert one is not None
    assert other not in (None, one)
    assert policy.opaque_digest(endpoint="/bot4839574813:AAFD39kkdpWt3ywyRZergyOLMaJhac61qc/x") is None
    assert policy.opaque_digest(endpoint="/api/v2/dags/nightly/dagRuns") is None
    assert policy.endpoint("/files/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms") == "/files/***"


def test_every_secret_registered_with_airflows_maskers_is_hidden() -> None:
    """The task SDK's and the core's masker (the UI's, the CLI's) both hide what was registered with them."""
    from airflow._shared.secrets_masker import mask_secret as core_mask_secret
    from airflow._shared.secrets_masker import reset_secrets_masker as core_reset
    from airflow.sdk._shared.secrets_masker import mask_secret as sdk_mask_secret
    from airflow.sdk._shared.secrets_masker import reset_secrets_masker as sdk_reset

    try:
        sdk_mask_secret("registered-in-task-1")
        core_mask_secret("registered-in-core-2")
        shown = DEFAULT_POLICY.value({"note": "registered-in-task-1 then registered-in-core-2"})
        assert shown == {"note": f"{MASK} then {MASK}"}
        assert redact({"error": "registered-in-core-2"}) == {"error": MASK}
    finally:
        sdk_reset()
        core_reset()
