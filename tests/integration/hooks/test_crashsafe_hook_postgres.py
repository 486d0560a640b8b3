"""CrashsafeHook on a real PostgreSQL: test_connection's answers, and a crashsafe-typed store connection."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from airflow.sdk import BaseHook
from airflow.sdk import Connection as SdkConnection

from airflow_crashsafe.hooks import CrashsafeHook
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import open_store, reset_store_cache, schema
from airflow_crashsafe.store.dbapi import connect_url

pytestmark = [pytest.mark.integration, pytest.mark.floor]  # floor: docs/packaging.md, "Version floor"

Define = Callable[[str, str], str]


def _crashsafe_typed(url: str) -> str:
    """The PostgreSQL database of ``url`` as a connection of type crashsafe (JSON form)."""
    parts = urlsplit(url)
    return json.dumps(
        {
            "conn_type": "crashsafe",
            "host": parts.hostname,
            "port": parts.port,
            "login": parts.username,
            "schema": parts.path.lstrip("/"),
        }
    )


def _migrate(url: str) -> None:
    db = connect_url(url)
    try:
        schema.migrate(db)
    finally:
        db.close()


def test_test_connection_on_a_migrated_postgres_store(postgres_url: str, airflow_conn: Define) -> None:
    """It succeeds, naming PostgreSQL, the database, its host and port, and the current version."""
    _migrate(postgres_url)
    ok, message = CrashsafeHook(crashsafe_conn_id=airflow_conn("pg_store", postgres_url)).test_connection()
    parts = urlsplit(postgres_url)
    assert ok, message
    assert message.startswith("Connected to PostgreSQL ")
    assert f"database {parts.path.lstrip('/')!r} on {parts.hostname}:{parts.port}" in message
    assert f"crashsafe schema version {schema.latest_version()} (current)" in message


def test_test_connection_on_an_empty_postgres_database_asks_for_migrate(
    postgres_url: str, airflow_conn: Define
) -> None:
    """A reachable database without crashsafe's tables fails with the migrate command, and stays empty."""
    ok, message = CrashsafeHook(crashsafe_conn_id=airflow_conn("pg_store", postgres_url)).test_connection()
    assert not ok
    assert "holds no crashsafe schema yet" in message
    assert "airflow-crashsafe db migrate" in message
    db = connect_url(postgres_url)
    try:
        db.begin()
        assert schema.current_version(db) == 0
        db.rollback()
    finally:
        db.close()


@pytest.mark.parametrize("broken", ["port", "database"])
def test_test_connection_fails_on_wrong_port_or_missing_database(
    broken: str, postgres_url: str, airflow_conn: Define
) -> None:
    """A wrong port or a database that does not exist gives (False, the driver's reason); nothing raises."""
    parts = urlsplit(postgres_url)
    if broken == "port":
        url = urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:1"))
    else:
        url = urlunsplit(parts._replace(path="/no_such_database"))
    ok, message = CrashsafeHook(crashsafe_conn_id=airflow_conn("pg_store", url)).test_connection()
    assert not ok
    assert message.startswith("Cannot open the crashsafe store connection 'pg_store'")
    assert ("port 1 failed" if broken == "port" else 'database "no_such_database" does not exist') in message


def _core_connection(conn_id: str) -> Any:
    from airflow.models import Connection

    return Connection.get_connection_from_secrets(conn_id)


# The api-server's Test button tests through the core model on 3.2 and 3.3 (its hook lookup warns
# on 3.3; Airflow 3.2.0's ORM models use the ``noload`` strategy the floor lock's SQLAlchemy 2.1
# deprecates). Airflow 3.3 also tests on a worker, through the task SDK's Connection.
@pytest.mark.filterwarnings("ignore:ProvidersManager.hooks is deprecated")
@pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")
@pytest.mark.parametrize(
    "get_connection",
    [
        pytest.param(_core_connection, id="api-server"),
        pytest.param(
            BaseHook.get_connection,
            id="worker",
            marks=pytest.mark.skipif(
                not hasattr(SdkConnection, "test_connection"),
                reason="Airflow 3.2 has no worker-side connection test (task SDK "
                "Connection.test_connection, Airflow 3.3); its api-server's test runs as [api-server]",
            ),
        ),
    ],
)
def test_airflow_connection_test_of_a_crashsafe_connection_runs_the_hook(
    postgres_url: str, airflow_conn: Define, get_connection: Callable[[str], Any]
) -> None:
    """Airflow's connection test (the UI's Test button) on a crashsafe connection runs CrashsafeHook's."""
    _migrate(postgres_url)
    conn_id = airflow_conn("typed_store", _crashsafe_typed(postgres_url))
    ok, message = get_connection(conn_id).test_connection()
    assert ok, message
    assert "(current)" in message


def test_open_store_on_a_crashsafe_typed_default_connection(
    postgres_url: str, airflow_conn: Define, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crashsafe_default of type crashsafe is the PostgreSQL store that open_store() uses."""
    monkeypatch.delenv("AIRFLOW__CRASHSAFE__CONN_ID", raising=False)
    airflow_conn("crashsafe_default", _crashsafe_typed(postgres_url))
    reset_store_cache()
    store = open_store()
    assert store.location == "connection 'crashsafe_default'"
    store.record_event("committed", Slot("d", "t", -1, "p"), "t", Attempt(1, "ti", "r", 0), token=1)
    db = connect_url(postgres_url)
    try:
        assert db.execute("SELECT kind FROM crashsafe_events").fetchall() == [("committed",)]
    finally:
        db.close()
    reset_store_cache()
