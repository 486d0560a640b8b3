"""Secrets by shape in free text and string values: a corpus of real formats, and what stays readable."""

from __future__ import annotations

import base64
import time
from urllib.parse import quote

import pytest

from airflow_crashsafe.redaction import DEFAULT_POLICY, MASK
from tests.support.secret_corpus import Shape, encoded_forms, text_shapes

SHAPES = text_shapes()


def test_the_corpus_has_the_shapes_real_apis_use() -> None:
    """At least 50 distinct shapes, each secret present in its text (raw or encoded)."""
    assert len({s.name for s in SHAPES}) == len(SHAPES) >= 50
    assert all(any(form in s.text for form in encoded_forms(s.secret)) for s in SHAPES)


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_no_secret_shape_survives_in_text_or_a_string_value(shape: Shape) -> None:
    """Each corpus secret is gone, in every encoding, from the text and from a JSON value holding it."""
    shown = DEFAULT_POLICY.text(shape.text) + repr(DEFAULT_POLICY.value({"detail": [shape.text]}))
    assert MASK in shown
    assert [form for form in encoded_forms(shape.secret) if form in shown] == []


@pytest.mark.parametrize(
    "text",
    [
        "Task nightly_sales.load_orders failed at 2024-01-01T00:00:00+00:00 with exit code 1",
        "run scheduled__2024-01-01T00:00:00+00:00 of dag nightly_sales",
        'File "/opt/airflow/dags/nightly_sales_report_v2.py", line 12, in execute',
        "HTTP 500 from https://api.example.com/v2/payments: internal error",
        "GET https://api.example.com/api/v2/dags/nightly/dagRuns/0f8b3c2a-1234-4bcd-9abc-0123456789ab",
        "s3://warehouse/raw/2024/01/01/orders.parquet",
        "paid ch_3MmlLrLkdIwHu7ix0snN0B15 for cus_NffrFeUfNV2Hib",
        "commit 3f786850e387550fdab836ed7e6dc881de23001b",
        "mail sent to ops@example.com; 3 recipients",
        "basic plan, token expired, please refresh",
        "Authorization header missing",
        "key: value, sort_key: abc",
        "internationalization_and_localization_settings",
        "SlackRequestError from notifier sink 'SlackWebhookNotifier': Invalid URL",
    ],
)
def test_ordinary_text_stays_readable(text: str) -> None:
    """Paths, run ids, UUIDs, object ids, hashes, emails and prose that mention secrets are kept."""
    assert DEFAULT_POLICY.text(text) == text


def test_basic_credentials_in_free_text_are_masked() -> None:
    """Basic credentials go whatever surrounds them, also when they decode to no user:password text."""
    short = base64.b64encode(b"ann:pw").decode()  # too short to be taken for a base64 run
    binary = base64.b64encode(bytes(range(200, 230))).decode()  # not text: only its scheme says it
    for credential in (short, binary):
        for text in (f"proxy rejected Basic {credential} (407)", f"Authorization: Basic {credential}"):
            shown = DEFAULT_POLICY.text(text)
            assert credential not in shown, shown
            assert "Basic" in shown or "Authorization: ***" in shown


def test_an_authorization_header_loses_scheme_and_credential_together() -> None:
    """'Authorization: Basic <b64>' never keeps the base64 beside a masked scheme word."""
    credential = base64.b64encode(b"user:correct-horse").decode()
    assert DEFAULT_POLICY.text(f"Authorization: Basic {credential}") == "Authorization: ***"
    assert DEFAULT_POLICY.text(f"'Authorization': 'Basic {credential}'") == "'Authorization': '***'"


def test_base64_and_url_encoded_secrets_are_masked_by_what_they_decode_to() -> None:
    """A base64 run decoding to a secret pair, and URL-encoded text holding one, are masked."""
    secret = "Zq8vN2xR7mK4pL9w"
    encoded = base64.b64encode(f'{{"client_secret": "{secret}"}}'.encode()).decode()
    assert DEFAULT_POLICY.text(f"payload={encoded}") == f"payload={MASK}"
    assert DEFAULT_POLICY.text(f"blob {encoded} end") == f"blob {MASK} end"
    form = quote(f"user=etl&password={secret}&x=1", safe="")
    assert quote(secret, safe="") not in DEFAULT_POLICY.text(f"body={form}")
    assert "user%3Detl" in DEFAULT_POLICY.text(f"body={form}")


def test_a_connection_string_keeps_its_plain_parts() -> None:
    """Only the secret parts of a connection string go; server, database and user stay readable."""
    text = "Server=tcp:db.acme.net,1433;Database=dw;User ID=etl;Password=p@ss, w0rd!;Encrypt=True"
    assert DEFAULT_POLICY.text(text) == (
        "Server=tcp:db.acme.net,1433;Database=dw;User ID=etl;Password=***;Encrypt=True"
    )


@pytest.mark.parametrize(
    "adversarial",
    [
        "A" * 400_000,
        'password: "' * 40_000,
        "a=" * 200_000,
        "/x1" * 130_000,
        "%41" * 130_000,
        "-----BEGIN RSA PRIVATE KEY-----" * 13_000,
        "<a>" * 130_000,
        "Digest a=1," * 36_000,
        "eyJ" * 130_000,
        "https://u:p@" * 33_000,
        "--password " * 36_000,
        "password is " * 33_000 + "x",
        "Server=a;" + "User ID=a;" * 40_000,
        "x" * 15 + " " + "Basic " * 66_000,
    ],
    ids=lambda text: repr(text[:12]),
)
def test_scrubbing_stays_linear_on_adversarial_text(adversarial: str) -> None:
    """400 kB built to make a backtracking pattern go quadratic is scrubbed in seconds, not hours."""
    started = time.monotonic()
    DEFAULT_POLICY.scrub(adversarial)
    assert time.monotonic() - started < 10
