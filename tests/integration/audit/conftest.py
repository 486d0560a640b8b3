"""A crashsafe store per test (PostgreSQL or embedded SQLite), as in tests/integration/effects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.store import open_store, reset_store_cache
from airflow_crashsafe.store.store import Store


@pytest.fixture(params=["postgres", "sqlite"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Store]:
    """The configured crashsafe store, on PostgreSQL or on the embedded SQLite file."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", url)
    else:
        monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
        monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "crashsafe.db"))
    reset_store_cache()
    yield open_store()
    reset_store_cache()
