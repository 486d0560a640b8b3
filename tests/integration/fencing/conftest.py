"""Fixtures of the fencing integration tests: a target database of each kind and a store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.store import Store
from tests.support.engines import ENGINES


@pytest.fixture(params=list(ENGINES))
def target_url(request: pytest.FixtureRequest) -> str:
    """URL of a fresh target database: a new PostgreSQL or MariaDB database, a new SQLite or DuckDB file."""
    url: str = request.getfixturevalue(ENGINES[request.param])
    return url


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """URL of the crashsafe store these tests record events in (a SQLite file of this test)."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A crashsafe store of this test alone."""
    opened = Store(lambda: connect_url(store_url), location=store_url)
    yield opened
    opened.close()
