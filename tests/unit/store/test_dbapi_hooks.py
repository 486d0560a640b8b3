"""connect_target opens Airflow connections through their own SQL hook; SQLite and the refusals."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.sql.hooks.sql import DbApiHook
from airflow.providers.sqlite.hooks.sqlite import SqliteHook

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store.dbapi import SQLITE, Db, connect_hook, connect_target, get_sql_hook
from airflow_crashsafe.store.store import connection_store

Define = Callable[[str, str], str]


def _settings(db: Db) -> tuple[Any, ...]:
    raw = db.raw
    pragma = [
        raw.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("busy_timeout", "journal_mode", "synchronous")
    ]
    return (raw.isolation_level, *pragma)


#: What crashsafe needs of every SQLite connection: autocommit outside BEGIN, a 120 s busy wait,
#: WAL and synchronous=NORMAL (1).
EXPECTED_SQLITE = (None, 120_000, "wal", 1)


def test_sqlite_connection_with_host_is_opened_by_sqlite_hook(
    tmp_path: Path, airflow_conn: Define, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite connection with its file in host (Airflow's form) is opened by SqliteHook, then configured."""
    opened: list[sqlite3.Connection] = []
    original = SqliteHook.get_conn

    def spy(self: SqliteHook) -> sqlite3.Connection:
        opened.append(original(self))
        return opened[-1]

    monkeypatch.setattr(SqliteHook, "get_conn", spy)
    path = tmp_path / "host.db"
    conn_id = airflow_conn("host_form", json.dumps({"conn_type": "sqlite", "host": str(path)}))
    db = connect_target(conn_id)
    try:
        assert opened == [db.raw]
        assert db.dialect == SQLITE
        assert _settings(db) == EXPECTED_SQLITE
        assert db.describe().endswith(f"file {path}")
    finally:
        db.close()


@pytest.mark.parametrize(
    "definition",
    [
        lambda path: f"sqlite:///{path}",  # sqlite:////abs/path.db: Airflow puts the path in schema
        lambda path: json.dumps({"conn_type": "sqlite", "extra": {"path": str(path)}}),
    ],
    ids=["uri-schema", "extra-path"],
)
def test_sqlite_connection_forms_sqlite_hook_cannot_open_still_work(
    definition: Callable[[Path], str], tmp_path: Path, airflow_conn: Define
) -> None:
    """sqlite:////abs/path.db and an extra path open that file with the same settings."""
    path = tmp_path / "uri.db"
    db = connect_target(airflow_conn("uri_form", definition(path)))
    try:
        db.execute("CREATE TABLE t (x INTEGER)")
        assert _settings(db) == EXPECTED_SQLITE
    finally:
        db.close()
    assert path.is_file()


def test_store_on_a_hook_opened_sqlite_connection_serves_threads(
    tmp_path: Path, airflow_conn: Define
) -> None:
    """A store on a SQLite connection SqliteHook opened works from several threads and closes cleanly."""
    conn_id = airflow_conn(
        "thread_store", json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "s.db")})
    )
    store = connection_store(conn_id)
    slot = Slot("d", "t", -1, "p")
    errors: list[BaseException] = []

    def record(n: int) -> None:
        try:
            store.record_event(
                "committed",
                slot,
                "t",
                Attempt(try_number=n, ti_id=f"ti-{n}", run_id="r", clear_number=0),
                token=n,
            )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(n,)) for n in (1, 2, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert sorted(e["token"] for e in store.events()) == [1, 2, 3]
    finally:
        store.close()


def test_sqlite_connection_without_a_file_is_refused(airflow_conn: Define) -> None:
    """A SQLite connection that names no file is a ConfigurationError with the URI form to use."""
    conn_id = airflow_conn("no_file", json.dumps({"conn_type": "sqlite"}))
    with pytest.raises(ConfigurationError, match=r"'no_file' names no file.*sqlite:////absolute/path\.db"):
        connect_target(conn_id)


def test_missing_connection_is_a_configuration_error() -> None:
    """An undefined connection says how to define it."""
    with pytest.raises(
        ConfigurationError, match=r"'not_defined_anywhere'.*AIRFLOW_CONN_NOT_DEFINED_ANYWHERE="
    ):
        connect_target("not_defined_anywhere")


def test_connection_whose_hook_is_not_sql_is_refused(airflow_conn: Define) -> None:
    """An HTTP connection's hook is no DbApiHook: the error names connection, type, hook and what works."""
    conn_id = airflow_conn("vendor_api", "http://example.invalid")
    with pytest.raises(ConfigurationError) as raised:
        connect_target(conn_id)
    message = str(raised.value)
    for part in ("'vendor_api'", "'http'", "HttpHook", "DbApiHook", "PostgreSQL", "SQLite"):
        assert part in message


def test_connection_type_without_hook_is_refused(airflow_conn: Define) -> None:
    """A connection type no installed provider knows is a ConfigurationError, not Airflow's exception."""
    conn_id = airflow_conn("odd", json.dumps({"conn_type": "nosuchdb", "host": "h"}))
    with pytest.raises(ConfigurationError, match=r"'odd' has type 'nosuchdb'.*PostgreSQL.*SQLite"):
        connect_target(conn_id)


class _OtherDbHook(DbApiHook):
    """A SQL hook of a database crashsafe does not write to."""

    conn_name_attr = "other_conn_id"
    default_conn_name = "other_default"
    conn_type = "otherdb"
    hook_name = "Other database"


def test_sql_hook_of_an_unsupported_database_is_refused(airflow_conn: Define) -> None:
    """A DbApiHook of a database crashsafe does not support is refused, naming what works."""
    conn_id = airflow_conn("other", json.dumps({"conn_type": "otherdb", "host": "h"}))
    with pytest.raises(ConfigurationError) as raised:
        connect_hook(_OtherDbHook(other_conn_id=conn_id))
    message = str(raised.value)
    for part in ("'other'", "'otherdb'", "_OtherDbHook", "PostgreSQL", "SQLite"):
        assert part in message


def test_get_sql_hook_is_the_connections_own_hook(tmp_path: Path, airflow_conn: Define) -> None:
    """get_sql_hook returns what get_connection(conn_id).get_hook() returns, bound to that connection."""
    hook = get_sql_hook(airflow_conn("lite", f"sqlite:///{tmp_path / 'x.db'}"))
    assert isinstance(hook, SqliteHook)
    assert hook.get_conn_id() == "lite"


def test_duckdb_connection_is_opened_by_the_duckdb_providers_hook_on_its_file(
    tmp_path: Path, airflow_conn: Define
) -> None:
    """With the DuckDB provider installed, a duckdb:////path connection is opened by DuckDBHook (its
    extra's memory_limit applies) on that file, not on the in-memory database the hook alone picks."""
    pytest.importorskip("airflow.providers.duckdb.hooks.duckdb")
    path = tmp_path / "target.duckdb"
    conn_id = airflow_conn("duck", f"duckdb:///{path}?memory_limit=123MiB")
    db = connect_target(conn_id)
    try:
        assert db.raw.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "123.0 MiB"
        db.raw.execute("CREATE TABLE kept AS SELECT 42 AS answer")
    finally:
        db.close()
    import duckdb

    with duckdb.connect(str(path)) as again:
        assert again.execute("SELECT answer FROM kept").fetchone() == (42,)
