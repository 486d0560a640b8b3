"""CrashsafeHook on a SQLite store: what Airflow needs of a hook, and what test_connection says."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from airflow.sdk import BaseHook

from airflow_crashsafe.hooks import CrashsafeHook
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import schema
from airflow_crashsafe.store.dbapi import connect_url

Define = Callable[[str, str], str]


@pytest.fixture
def store_conn(tmp_path: Path, airflow_conn: Define) -> tuple[str, Path]:
    """``crashsafe_default`` defined as a SQLite file that does not exist yet."""
    path = tmp_path / "store.db"
    return airflow_conn("crashsafe_default", f"sqlite:///{path}"), path


def test_hook_declares_what_airflow_looks_up() -> None:
    """The connection-id attribute, default connection, type and UI name are the documented ones."""
    assert CrashsafeHook.conn_name_attr == "crashsafe_conn_id"
    assert CrashsafeHook.default_conn_name == "crashsafe_default"
    assert CrashsafeHook.conn_type == "crashsafe"
    assert CrashsafeHook.hook_name == "Crashsafe store"
    assert CrashsafeHook().crashsafe_conn_id == "crashsafe_default"
    assert CrashsafeHook(crashsafe_conn_id="other").crashsafe_conn_id == "other"


def test_crashsafe_connection_resolves_to_the_hook(airflow_conn: Define) -> None:
    """Airflow's get_hook() on a connection of type crashsafe builds a CrashsafeHook for it."""
    conn_id = airflow_conn("typed", json.dumps({"conn_type": "crashsafe", "host": "db.invalid"}))
    hook = BaseHook.get_connection(conn_id).get_hook()
    assert isinstance(hook, CrashsafeHook)
    assert hook.crashsafe_conn_id == conn_id


def test_test_connection_asks_for_migrate_and_does_not_migrate(store_conn: tuple[str, Path]) -> None:
    """On a store without crashsafe's tables it fails, names the file, says to migrate, creates nothing."""
    conn_id, path = store_conn
    ok, message = CrashsafeHook(crashsafe_conn_id=conn_id).test_connection()
    assert not ok
    assert str(path) in message
    assert "no crashsafe schema yet; run `airflow-crashsafe db migrate`" in message
    db = connect_url(f"sqlite:///{path}")
    try:
        assert schema.current_version(db) == 0
    finally:
        db.close()


def test_test_connection_succeeds_on_a_migrated_store(store_conn: tuple[str, Path]) -> None:
    """After migration it succeeds and reports the database and the current schema version."""
    conn_id, path = store_conn
    hook = CrashsafeHook(crashsafe_conn_id=conn_id)
    store = hook.get_store()
    try:
        store.migrate()
    finally:
        store.close()
    ok, message = hook.test_connection()
    assert ok, message
    assert str(path) in message
    assert f"crashsafe schema version {schema.latest_version()} (current)" in message


def test_test_connection_names_the_conn_id_to_migrate_when_not_configured(
    tmp_path: Path, airflow_conn: Define
) -> None:
    """For a connection other than [crashsafe] conn_id, the migrate hint says how to point the CLI at it."""
    conn_id = airflow_conn("other_store", f"sqlite:///{tmp_path / 'other.db'}")
    ok, message = CrashsafeHook(crashsafe_conn_id=conn_id).test_connection()
    assert not ok
    assert "run `AIRFLOW__CRASHSAFE__CONN_ID=other_store airflow-crashsafe db migrate`" in message


def test_test_connection_flags_a_store_newer_than_the_package(store_conn: tuple[str, Path]) -> None:
    """A schema newer than this package knows fails with the advice to upgrade airflow-crashsafe."""
    conn_id, path = store_conn
    db = connect_url(f"sqlite:///{path}")
    try:
        schema.migrate(db)
        db.execute(
            f"INSERT INTO {schema.VERSION_TABLE} (version, description) VALUES (%(v)s, 'future')",
            {"v": schema.latest_version() + 1},
        )
    finally:
        db.close()
    ok, message = CrashsafeHook(crashsafe_conn_id=conn_id).test_connection()
    assert not ok
    assert "newer than this package knows" in message
    assert "upgrade airflow-crashsafe" in message


@pytest.mark.parametrize(
    "definition",
    [None, "http://example.invalid", json.dumps({"conn_type": "sqlite", "host": "/no/such/dir/x.db"})],
    ids=["undefined", "not-sql", "unopenable"],
)
def test_test_connection_reports_failures_without_raising(
    definition: str | None, airflow_conn: Define
) -> None:
    """Undefined, non-SQL and unopenable connections give (False, why), naming the connection."""
    conn_id = "broken_store" if definition is None else airflow_conn("broken_store", definition)
    ok, message = CrashsafeHook(crashsafe_conn_id=conn_id).test_connection()
    assert not ok
    assert "'broken_store'" in message


def test_test_connection_reports_a_file_that_is_no_database(tmp_path: Path, airflow_conn: Define) -> None:
    """A file that is not a SQLite database fails the test instead of raising."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database" * 100)
    ok, message = CrashsafeHook(
        crashsafe_conn_id=airflow_conn("garbage", f"sqlite:///{path}")
    ).test_connection()
    assert not ok
    assert "not a database" in message


def test_get_store_writes_to_the_connections_database(store_conn: tuple[str, Path]) -> None:
    """get_store() is the store in this connection's database, named after the connection."""
    conn_id, path = store_conn
    store = CrashsafeHook(crashsafe_conn_id=conn_id).get_store()
    try:
        assert store.location == f"connection {conn_id!r}"
        store.record_event("committed", Slot("d", "t", -1, "p"), "t", Attempt(1, "ti", "r", 0), token=1)
        assert [e["kind"] for e in store.events()] == ["committed"]
    finally:
        store.close()
    assert path.is_file()


def test_get_conn_is_a_new_connection_each_time(store_conn: tuple[str, Path]) -> None:
    """get_conn() opens a fresh Db the caller owns, like DbApiHook.get_conn()."""
    hook = CrashsafeHook(crashsafe_conn_id=store_conn[0])
    first, second = hook.get_conn(), hook.get_conn()
    try:
        assert first is not second
        assert first.execute("SELECT 1").fetchone() == (1,)
    finally:
        first.close()
        second.close()
