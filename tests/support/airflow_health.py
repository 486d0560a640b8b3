"""An api-server's ``/api/v2/monitor/health`` as Airflow 3.3.2 answers it, served by a real HTTP server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.fencing.triggerer import forget_triggerer_health
from tests.support.httpserver import Reply, Server, serve

__all__ = ["api_server_health", "health_body"]


def health_body(triggerer: str | None = "healthy", triggerer_age: float | None = 2.0) -> dict[str, Any]:
    """Airflow 3.3.2's ``HealthInfoResponse``: ``triggerer=None`` is "no triggerer ever ran"."""
    now = datetime.now(timezone.utc)

    def iso(age: float | None) -> str | None:
        return (now - timedelta(seconds=age)).isoformat() if age is not None else None

    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": iso(1.0)},
        "triggerer": {
            "status": triggerer,
            "latest_triggerer_heartbeat": iso(triggerer_age) if triggerer is not None else None,
        },
        "dag_processor": {"status": None, "latest_dag_processor_heartbeat": None},
    }


@contextmanager
def api_server_health(monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]) -> Iterator[Server]:
    """Serve ``body`` as the health of the api-server that ``[crashsafe] api_url`` names."""
    with serve(lambda _request: Reply(200, body)) as server:
        monkeypatch.setenv("AIRFLOW__CRASHSAFE__API_URL", server.url)
        config.reset_cache()
        forget_triggerer_health()
        try:
            yield server
        finally:
            forget_triggerer_health()
