"""A call's known secrets are found again in every encoding a log line, an echo or an error uses."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, quote_plus

import pytest

from airflow_crashsafe.redaction import DEFAULT_POLICY, MASK
from airflow_crashsafe.secret_shapes import KnownSecrets

SECRET = "s3cr3t/+value&more"  # URL-encoding and base64 both change it


@pytest.mark.parametrize(
    "quoted",
    [
        SECRET,
        quote(SECRET, safe=""),
        quote_plus(SECRET),
        json.dumps(SECRET)[1:-1],
        base64.b64encode(SECRET.encode()).decode(),
        base64.b64encode(f"svc:{SECRET}".encode()).decode(),  # inside an echoed Basic credential
        base64.b64encode(f"ab:{SECRET}".encode()).decode(),
        base64.urlsafe_b64encode(f"x{SECRET}".encode()).decode(),
    ],
)
def test_a_known_secret_is_masked_in_every_encoding(quoted: str) -> None:
    """Raw, URL-encoded, JSON-escaped and base64 at any alignment (the whole base64 run goes)."""
    shown = KnownSecrets([SECRET]).scrub(f"vendor echoed [{quoted}] back")
    assert shown == f"vendor echoed [{MASK}] back"


def test_a_policy_knowing_a_header_masks_its_echo_under_any_name() -> None:
    """A header value the vendor echoes under a harmless name is masked as a known secret."""
    policy = DEFAULT_POLICY.knowing({"x-functions-key": SECRET})
    echo = {"received": [SECRET, base64.b64encode(SECRET.encode()).decode(), quote(SECRET, safe="")]}
    assert policy.value(echo) == {"received": [MASK, MASK, MASK]}


def test_the_task_log_gets_the_plain_forms_of_every_known_secret() -> None:
    """What Airflow's masker is told covers the URL-encoded form urllib3 logs, not only the raw value."""
    masks = DEFAULT_POLICY.knowing({"api_key": SECRET}).log_masks()
    assert {SECRET, quote(SECRET, safe=""), quote_plus(SECRET)} <= masks
