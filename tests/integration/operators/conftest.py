"""Fixtures of the fenced SQL operator tests: a target database of each kind, a private store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.store.store import reset_store_cache
from tests.support.airflow_health import api_server_health, health_body
from tests.support.engines import ENGINES, dialect_of
from tests.support.sql_target import SqlTarget


@pytest.fixture(params=["postgresql", "sqlite"])
def target(request: pytest.FixtureRequest, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh target database, defined as the Airflow connection ``crashsafe_target``."""
    url: str = request.getfixturevalue("postgres_url" if request.param == "postgresql" else "sqlite_url")
    return SqlTarget(conn_id=airflow_conn("crashsafe_target", url), url=url, dialect=request.param)


@pytest.fixture(params=list(ENGINES))
def engine_target(request: pytest.FixtureRequest, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh target of every engine (PostgreSQL, SQLite, MariaDB through each MySQL client, DuckDB,
    Snowflake) as ``crashsafe_target``."""
    url: str = request.getfixturevalue(ENGINES[request.param])
    uri = url
    if request.param == "snowflake":  # the connection the provider's SnowflakeHook reads
        from airflow_crashsafe.testing.fakesnow import airflow_uri

        uri = airflow_uri(url)
    return SqlTarget(
        conn_id=airflow_conn("crashsafe_target", uri), url=url, dialect=dialect_of(request.param)
    )


@pytest.fixture
def pg_target(postgres_url: str, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh PostgreSQL target database (for tests needing pg_sleep or schemas)."""
    return SqlTarget(
        conn_id=airflow_conn("crashsafe_target", postgres_url), url=postgres_url, dialect="postgresql"
    )


@pytest.fixture(autouse=True)
def _private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Events of this test go to an embedded store of its own."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__CONN_ID", "crashsafe_store_not_defined")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "store.db"))
    reset_store_cache()
    yield
    reset_store_cache()


@pytest.fixture(autouse=True)
def _healthy_triggerer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A triggerer heartbeats (the api-server's health says so), so a waiting re-run defers."""
    with api_server_health(monkeypatch, health_body()):
        yield
