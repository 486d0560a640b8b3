"""A crashsafe store per test (PostgreSQL or embedded SQLite) and local vendors to call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.store import open_store, reset_store_cache
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor


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


@pytest.fixture
def honouring_vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyHonouringVendor]:
    """A vendor that honours Idempotency-Key, behind the Airflow HTTP connection ``vendor``."""
    with KeyHonouringVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        yield vendor


@pytest.fixture
def naive_vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[NaiveVendor]:
    """A vendor that books every request it receives, behind the connection ``vendor``."""
    with NaiveVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        yield vendor
