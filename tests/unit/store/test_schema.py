"""The store's migration list and the migration on an in-memory SQLite database."""

from __future__ import annotations

import pytest

from airflow_crashsafe.errors import StoreError
from airflow_crashsafe.store import schema
from airflow_crashsafe.store.dbapi import connect_url


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    """Migrations are append-only and consecutive, each written for both dialects."""
    assert [m.version for m in schema.MIGRATIONS] == list(range(1, len(schema.MIGRATIONS) + 1))
    for migration in schema.MIGRATIONS:
        assert migration.statements("postgresql")
        assert len(migration.statements("sqlite")) == len(migration.statements("postgresql"))


def test_migrate_twice_on_sqlite_applies_once() -> None:
    """A second migrate finds the work done and changes nothing."""
    db = connect_url("sqlite:///:memory:")
    try:
        assert schema.migrate(db) == schema.latest_version()
        assert schema.migrate(db) == schema.latest_version()
        rows = db.execute(f"SELECT version FROM {schema.VERSION_TABLE}").fetchall()
        assert rows == [(v,) for v in range(1, schema.latest_version() + 1)]
    finally:
        db.close()


def test_empty_store_is_version_zero_and_newer_store_is_refused() -> None:
    """An empty store reads as version 0; one ahead of the package raises StoreError."""
    db = connect_url("sqlite:///:memory:")
    try:
        assert schema.current_version(db) == 0
        schema.migrate(db)
        db.execute(f"INSERT INTO {schema.VERSION_TABLE} (version, description) VALUES (42, 'x')")
        with pytest.raises(StoreError, match="upgrade airflow-crashsafe"):
            schema.migrate(db)
    finally:
        db.close()
