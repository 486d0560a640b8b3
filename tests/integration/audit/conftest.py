"""A crashsafe store per test (PostgreSQL or embedded SQLite), as in tests/integration/effects."""

from __future__ import annotations

import pytest

from airflow_crashsafe.store.store import Store


@pytest.fixture
def store(configured_store: Store) -> Store:
    """The configured crashsafe store, on PostgreSQL and on the embedded SQLite file."""
    return configured_store
