"""URL paths: token-carrying segments are masked, ordinary API paths and ids stay readable."""

from __future__ import annotations

import pytest

from airflow_crashsafe.redaction import DEFAULT_POLICY, RedactionPolicy
from airflow_crashsafe.secret_shapes import Found, mask_path

TELEGRAM = "4839574813:AAFD39kkdpWt3ywyRZergyOLMaJhac61qc"
RANDOM_ID = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        (f"/bot{TELEGRAM}/sendMessage", "/bot***/sendMessage"),
        ("/botCANARY-7f3a9/sendMessage", "/bot***/sendMessage"),
        ("/services/T000/B000/XXXXsecretXXXX", "/services/T000/B000/***"),
        ("/services/TKV3YQVGA/BLR8BRS0Z/nzk0zace5iLKP35eWcfKE7JA", "/services/TKV3YQVGA/BLR8BRS0Z/***"),
        ("/api/webhooks/123456789012345678/abcDEF_ghi-JKLmnop0123", "/api/webhooks/123456789012345678/***"),
        (
            "/webhookb2/9da5da9c-4218-4c22-aed6-b5c8baebfff5@2f2b54b7-0141-4ba7-8fcd-ab7d17a60547"
            "/IncomingWebhook/1bf66ccbb8e745e791fa6e6de0cf465b/4361420b-8fde-48eb-b62a-0e34fec63f5c",
            "/webhookb2/***/IncomingWebhook/***/***",
        ),
        ("/hooks/catch/123456/abcdef1/", "/hooks/catch/123456/***/"),
        ("/trigger/deploy/with/key/dF3kJ9xLm2", "/trigger/deploy/with/key/***"),
        (f"/drive/v3/files/{RANDOM_ID}/export", "/drive/v3/files/***/export"),
        ("/v1/ghp_abcdefghijklmnopqrstuvwxyz0123456789/x", "/v1/***/x"),
    ],
)
def test_token_carrying_segments_are_masked(path: str, shown: str) -> None:
    """Bot tokens, webhook secrets, a key after /key/, token formats and random runs are masked."""
    assert mask_path(path) == shown
    assert DEFAULT_POLICY.endpoint(path) == shown


@pytest.mark.parametrize(
    "path",
    [
        "/api/v2/dags/nightly/dagRuns",
        "/api/v2/dags/nightly_sales/dagRuns/scheduled__2024-01-01T00:00:00+00:00/taskInstances/load/logs/1",
        "/api/v2/dags/nightly/dagRuns/manual__2024-05-05T10:11:12.123456+00:00",
        "/api/v2/dagRuns/0f8b3c2a-1234-4bcd-9abc-0123456789ab",
        "/v1/customers/cus_NffrFeUfNV2Hib/charges",
        "/repos/apache/airflow/pulls/12345",
        "/repos/apache/airflow/hooks/42/deliveries",
        "/api/auth/login",
        "/v1/tokens/revoke",
        "/files/report_2024-Q1.pdf",
        "/v2/x86_64/releases/v2.10.1",
        "/bots/123",
    ],
)
def test_ordinary_api_paths_stay_readable(path: str) -> None:
    """Words, CamelWords, numbers, dates, run ids, UUIDs and short object ids are kept."""
    assert mask_path(path) == path


def test_random_runs_are_opaque_and_credential_shapes_are_not() -> None:
    """A segment masked only for reading as random is reported apart: it may be an id."""
    found = Found()
    mask_path(f"/bot{TELEGRAM}/files/{RANDOM_ID}", found)
    assert TELEGRAM in found.credentials
    assert found.opaque == {RANDOM_ID}


def test_the_endpoint_keeps_its_query_rules_beside_the_path_rules() -> None:
    """Query stripped but for safe parameters, password dropped, token segment masked, in one go."""
    policy = RedactionPolicy.of(safe_query_params=["page"])
    assert (
        policy.endpoint(f"https://u:pw@api.telegram.org/bot{TELEGRAM}/getUpdates?offset=5&page=2")
        == "https://api.telegram.org/bot***/getUpdates?page=2"
    )
