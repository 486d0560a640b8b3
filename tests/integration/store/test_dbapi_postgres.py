"""connect_target on a real PostgreSQL: PostgresHook's psycopg 3 connection, kept as crashsafe needs it."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import psycopg
import pytest

from airflow_crashsafe.store import prepared
from airflow_crashsafe.store.dbapi import POSTGRES, connect_target

pytestmark = pytest.mark.integration


def test_postgres_connection_is_psycopg3_from_postgres_hook(
    postgres_url: str, airflow_conn: Callable[[str, str], str]
) -> None:
    """A postgres connection opens through PostgresHook as a psycopg 3 connection outside autocommit."""
    from airflow.providers.postgres.hooks import postgres

    assert postgres.USE_PSYCOPG3
    db = connect_target(airflow_conn("pg_target", postgres_url))
    try:
        assert isinstance(db.raw, psycopg.Connection)
        assert db.dialect == POSTGRES
        assert db.raw.autocommit is False
        parts = urlsplit(postgres_url)
        assert db.describe().startswith("PostgreSQL ")
        assert f"database {parts.path.lstrip('/')!r} on {parts.hostname}:{parts.port}" in db.describe()
    finally:
        db.close()


def test_hook_opened_connection_takes_the_ledgers_prepared_path(
    postgres_url: str, airflow_conn: Callable[[str, str], str]
) -> None:
    """The ledger's libpq prepared statements run on it (psycopg 3's pgconn), and prepare once."""
    db = connect_target(airflow_conn("pg_prepared", postgres_url))
    try:
        for _ in range(2):
            assert prepared.fetch_text(db, "SELECT %(a)s::text, %(b)s::text", {"a": "x", "b": 7}) == [
                ("x", "7")
            ]
        assert db.prepared is not None
        assert len(db.prepared) == 1
    finally:
        db.close()
