"""Key names that hold secrets, in every case style, and the ordinary names that stay readable."""

from __future__ import annotations

import pytest

from airflow_crashsafe.redaction import DEFAULT_POLICY, MASK, RedactionPolicy
from airflow_crashsafe.secret_shapes import key_words, name_is_secret


@pytest.mark.parametrize(
    "name",
    [
        "pwd",
        "Pwd",
        "dbPwd",
        "jwt",
        "idToken",
        "connectionString",
        "ConnectionString",
        "connection-string",
        "webhookUrl",
        "WEBHOOK_URL",
        "apiKey",
        "APIKey",
        "x-api-key",
        "DD-API-KEY",
        "clientSecret",
        "client_secret",
        "CLIENT_SECRET",
        "refreshToken",
        "x-functions-key",
        "Ocp-Apim-Subscription-Key",
        "AccountKey",
        "accountkey",
        "SharedAccessKey",
        "sharedAccessSignature",
        "sig",
        "primaryKey",
        "userPin",
        "requestSig",
        "DB_PASS",
        "passphrase",
        "privateKeyPem",
        "Set-Cookie",
        "sessionId",
        "authToken",
        "x-amz-security-token",
        "ado_pat",
    ],
)
def test_secret_names_in_any_case_style_are_masked(name: str) -> None:
    """camelCase, PascalCase, kebab-case, snake_case and SCREAMING_CASE names of secrets are masked."""
    assert name_is_secret(name)
    assert DEFAULT_POLICY.value({name: "v4lue-2b-hidden"}) == {name: MASK}


@pytest.mark.parametrize(
    "name",
    [
        "author",
        "authors",
        "authority",
        "passenger",
        "bypass_cache",
        "keyboard",
        "monkey",
        "key",
        "idempotency_key",
        "IdempotencyKey",
        "sort_key",
        "public_key",
        "object_key",
        "partition_key",
        "currency",
        "customer_id",
        "description",
    ],
)
def test_ordinary_names_stay_readable(name: str) -> None:
    """Words that merely contain a secret word's letters, and keys that name a place, are kept."""
    assert not name_is_secret(name)
    assert DEFAULT_POLICY.value({name: "ann"}) == {name: "ann"}


def test_edge_names_are_masked_when_they_hold_text_and_kept_when_numbers() -> None:
    """tokenizer_name is masked as Airflow's masker would; counts such as max_tokens stay numbers."""
    value = {"tokenizer_name": "bert-base", "max_tokens": 100, "session_timeout": 30, "private": True}
    assert DEFAULT_POLICY.value(value) == {
        "tokenizer_name": MASK,
        "max_tokens": 100,
        "session_timeout": 30,
        "private": True,
    }


def test_key_words_split_every_case_style_alike() -> None:
    """XApiKey, x-api-key, X_API_KEY and xApiKey are the same three words."""
    assert {tuple(key_words(n)) for n in ("XApiKey", "x-api-key", "X_API_KEY", "xApiKey")} == {
        ("x", "api", "key")
    }
    assert key_words("HTTPAuthToken") == ["http", "auth", "token"]


def test_fields_the_user_names_match_in_any_case_style() -> None:
    """redact_fields=["cardNumber"] masks card_number, CARD_NUMBER and card-number alike."""
    policy = RedactionPolicy.of(["cardNumber"])
    value = {"card_number": "4111", "CARD_NUMBER": "4111", "card-number": "4111", "card_type": "visa"}
    assert policy.value(value) == {
        "card_number": MASK,
        "CARD_NUMBER": MASK,
        "card-number": MASK,
        "card_type": "visa",
    }
