"""The UI app in process, with a real store and the user's readable DAGs set per test.

Airflow's api-server imports ``svcs``, which imports ``fastapi.testclient``; with httpx that
raises Starlette's "use httpx2" DeprecationWarning, which this suite turns into an error. It is
third-party import-time noise, not ours: it is ignored once here, for that import only.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    import airflow.api_fastapi.core_api.security  # noqa: F401
    from fastapi.testclient import TestClient

from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from airflow.api_fastapi.core_api.security import get_user

from airflow_crashsafe.store.store import Store, open_store, reset_store_cache
from airflow_crashsafe.ui.access import readable_dag_ids, ui_store, xcom_readable_dag_ids
from airflow_crashsafe.ui.app import create_app
from airflow_crashsafe.ui.health import JobSpan, outages, scheduler_state
from airflow_crashsafe.ui.models import ComponentHealth, Outage


class FakeScheduler:
    """A scheduler history: one job until ``killed``, the next from ``restarted``."""

    def __init__(self, spans: list[JobSpan]) -> None:
        self.spans = spans

    def health(self) -> tuple[bool, list[ComponentHealth]]:
        beat = self.spans[-1].last_alive if self.spans else None
        return True, [
            ComponentHealth(
                component="scheduler", status="healthy", latest_heartbeat=beat, heartbeat_age_seconds=2.0
            ),
            ComponentHealth(component="triggerer", status="never_started"),
            ComponentHealth(component="dag_processor", status="healthy", latest_heartbeat=beat),
        ]

    def outages(self, *, since: datetime, now: datetime) -> list[Outage]:
        return outages(self.spans, now=now, since=since, grace=timedelta(seconds=30))


class UiHarness:
    """The app plus the knobs a test turns: who is signed in and what they may read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.user: SimpleAuthManagerUser | None = SimpleAuthManagerUser(username="alice", role="viewer")
        self.allowed: set[str] = set()
        self.spans: list[JobSpan] = []
        self.app = create_app()
        self.app.dependency_overrides[ui_store] = lambda: store
        self.app.dependency_overrides[readable_dag_ids] = self._allowed
        self.app.dependency_overrides[xcom_readable_dag_ids] = self._allowed
        self.app.dependency_overrides[get_user] = self._user
        self.app.dependency_overrides[scheduler_state] = lambda: FakeScheduler(self.spans)
        self.client = TestClient(self.app, root_path="/crashsafe")

    def _user(self) -> SimpleAuthManagerUser:
        from fastapi import HTTPException

        if self.user is None:
            raise HTTPException(401, "Not authenticated")
        return self.user

    def _allowed(self) -> frozenset[str]:
        self._user()
        return frozenset(self.allowed)

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params=params)


@pytest.fixture
def ui(sqlite_url: str) -> Iterator[UiHarness]:
    """The UI over a fresh embedded-SQLite store; alice (viewer) signed in, reading no DAG yet."""
    reset_store_cache()
    store = open_store(sqlite_url)
    store.migrate()
    harness = UiHarness(store)
    try:
        yield harness
    finally:
        harness.client.close()
        reset_store_cache()


NOW = datetime.now(timezone.utc).replace(microsecond=0)
