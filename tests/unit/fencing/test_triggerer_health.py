"""Whether a re-run may defer: the api-server's health says a triggerer heartbeats, read cheaply."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_crashsafe.fencing.triggerer import HEALTH_CACHE_SECONDS, triggerer_health
from tests.support.airflow_health import api_server_health, health_body


@pytest.mark.parametrize(
    ("body", "alive", "reason"),
    [
        pytest.param({"triggerer": "healthy", "triggerer_age": 4.0}, True, "heartbeat ", id="alive"),
        pytest.param({"triggerer": None}, False, "no such job has ever heartbeated", id="never-ran"),
        pytest.param(
            {"triggerer": "unhealthy", "triggerer_age": 300.0}, False, "reported unhealthy", id="dead"
        ),
        pytest.param({"triggerer": "healthy", "triggerer_age": 600.0}, False, "stale", id="stale"),
    ],
)
def test_the_health_endpoint_decides_whether_a_triggerer_heartbeats(
    monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], alive: bool, reason: str
) -> None:
    """Airflow 3.3.2's health JSON: only a healthy triggerer with a fresh heartbeat counts."""
    with api_server_health(monkeypatch, health_body(**body)) as api:
        health = triggerer_health()
    assert health.alive is alive
    assert reason in health.reason
    assert api.url in health.reason


def test_one_get_serves_every_rerun_for_a_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readings are cached per api-server URL: a burst of re-runs costs one request."""
    with api_server_health(monkeypatch, health_body()) as api:
        assert all(triggerer_health().alive for _ in range(5))
        assert len(api.requests) == 1
        later = time.monotonic() + HEALTH_CACHE_SECONDS
        monkeypatch.setattr("airflow_crashsafe.fencing.triggerer.time.monotonic", lambda: later)
        triggerer_health()
        assert len(api.requests) == 2


def test_an_unreachable_api_server_is_no_triggerer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed port: health unknown, so no deferral that nobody may answer."""
    with api_server_health(monkeypatch, health_body()) as api:
        api.stop()
        health = triggerer_health()
    assert health.alive is False
    assert "health unknown" in health.reason
