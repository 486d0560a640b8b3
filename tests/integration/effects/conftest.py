"""A crashsafe store per test (PostgreSQL or embedded SQLite) and local vendors to call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor


@pytest.fixture
def store(configured_store: Store) -> Store:
    """The configured crashsafe store, on PostgreSQL and on the embedded SQLite file."""
    return configured_store


@pytest.fixture
def honouring_vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[KeyHonouringVendor]:
    """A vendor that honours Idempotency-Key, behind the connection ``vendor``, which declares it."""
    with KeyHonouringVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", f"{vendor.url}?{HONOURS_KEYS_EXTRA}=true")
        yield vendor


@pytest.fixture
def naive_vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[NaiveVendor]:
    """A vendor that books every request it receives, behind the connection ``vendor``."""
    with NaiveVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        yield vendor
