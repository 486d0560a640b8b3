"""The thin DB-API layer: placeholder translation, URL parsing, explicit transactions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.store.dbapi import POSTGRES, SQLITE, connect_target, connect_url, sqlite_path_from_url


def test_named_placeholders_are_rewritten_for_sqlite_only() -> None:
    """%(name)s becomes :name for sqlite3 and %% a literal %; PostgreSQL SQL passes unchanged."""
    sql = "SELECT %(a)s, strftime('%%Y', 'now') WHERE x = %(b_2)s"
    assert SQLITE.adapt(sql) == "SELECT :a, strftime('%Y', 'now') WHERE x = :b_2"
    assert POSTGRES.adapt(sql) == sql


@pytest.mark.parametrize(
    ("url", "path"),
    [("sqlite:////abs/dir/x.db", "/abs/dir/x.db"), ("sqlite:///rel/x.db", "rel/x.db")],
)
def test_sqlite_url_to_path(url: str, path: str) -> None:
    """sqlite:////abs is an absolute path, sqlite:///rel a relative one."""
    assert sqlite_path_from_url(url) == path


@pytest.mark.parametrize("url", ["sqlite://host/x.db", "sqlite:///"])
def test_bad_sqlite_urls_are_configuration_errors(url: str) -> None:
    """A SQLite URL with a host or without a file is refused with a hint."""
    with pytest.raises(ConfigurationError, match=r"sqlite:////absolute/path\.db"):
        sqlite_path_from_url(url)


def test_unsupported_scheme_is_a_configuration_error() -> None:
    """Only PostgreSQL, SQLite, MySQL/MariaDB and DuckDB URLs are accepted."""
    with pytest.raises(ConfigurationError, match="Unsupported database URL scheme 'oracle'"):
        connect_url("oracle://u@h/db")


@pytest.mark.parametrize("opened_by", ["url", "sqlite_hook"])
def test_sqlite_transactions_commit_and_roll_back(
    opened_by: str, tmp_path: Path, airflow_conn: Callable[[str, str], str]
) -> None:
    """begin/commit/rollback on SQLite behave as explicit transactions, from a URL or SqliteHook."""
    if opened_by == "url":
        db = connect_url("sqlite:///:memory:")
    else:
        host_form = json.dumps({"conn_type": "sqlite", "host": str(tmp_path / "tx.db")})
        db = connect_target(airflow_conn("sqlite_tx", host_form))
    try:
        db.execute("CREATE TABLE t (x INTEGER)")
        db.begin()
        db.execute("INSERT INTO t VALUES (%(x)s)", {"x": 1})
        db.rollback()
        db.begin(immediate=False)
        db.execute("INSERT INTO t VALUES (%(x)s)", {"x": 2})
        db.commit()
        assert db.execute("SELECT x FROM t").fetchall() == [(2,)]
    finally:
        db.close()
