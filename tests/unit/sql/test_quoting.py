"""Identifier quoting and table-name parsing: a user's name can only ever be a name."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql.quoting import Quoter, TableName, parse_table_name, sqlite_quote

names = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), min_size=1, max_size=30
)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("revenue", ("revenue",)),
        ("mart.revenue", ("mart", "revenue")),
        (" mart . revenue ", ("mart", "revenue")),
        ('"my.mart".revenue', ("my.mart", "revenue")),
        ('"odd""name"', ('odd"name',)),
        ('mart."a.b"', ("mart", "a.b")),
        ("revenue; DROP TABLE x", ("revenue; DROP TABLE x",)),
        ("Mixed.Case", ("Mixed", "Case")),
    ],
)
def test_parse_table_name(text: str, parts: tuple[str, ...]) -> None:
    """Dots split parts, double quotes protect dots and quotes, bare parts are exact (no case folding)."""
    assert parse_table_name(text).parts == parts


@pytest.mark.parametrize("text", ["", "a..b", "a.", ".a", '"unclosed', '"a"b', "a.b.c", "a\x00b"])
def test_malformed_table_names_are_refused(text: str) -> None:
    """Empty parts, stray or unclosed quotes, three parts and NUL bytes are configuration errors."""
    with pytest.raises(ConfigurationError):
        parse_table_name(text)


@given(st.lists(names, min_size=1, max_size=2))
def test_display_round_trips(parts: list[str]) -> None:
    """Any parsed name prints to a spelling that parses back to the same parts."""
    table = TableName(tuple(parts))
    if any(p != p.strip() or p.strip() == "" for p in parts):
        return  # surrounding whitespace is insignificant in bare parts, by design
    assert parse_table_name(table.display()).parts == table.parts


def test_postgres_quoting_uses_psycopg_identifier() -> None:
    """PostgreSQL names are quoted by psycopg: inner quotes doubled, the whole name one identifier."""
    quoter = Quoter("postgresql")
    assert quoter.ident('a"b') == '"a""b"'
    assert quoter.table(parse_table_name("mart.revenue; DROP TABLE x")) == '"mart"."revenue; DROP TABLE x"'


@given(names)
def test_sqlite_quoting_is_read_back_by_sqlite_as_the_same_name(name: str) -> None:
    """SQLite's own parser reads any quoted name (quotes, semicolons, comments) back as exactly that name."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE TABLE t ({sqlite_quote(name)} INTEGER)")
        assert conn.execute("SELECT name FROM pragma_table_info('t')").fetchone()[0] == name
        assert Quoter("sqlite").ident(name) == sqlite_quote(name)
    finally:
        conn.close()


def test_quoted_injection_cannot_run_in_sqlite() -> None:
    """A name built to break out of its quotes is a missing table, and the victim table survives."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE victim (x)")
    name = 'x"; DROP TABLE victim; --'
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        conn.execute(f"SELECT * FROM {Quoter('sqlite').table(parse_table_name(name))}")
    assert conn.execute("SELECT count(*) FROM victim").fetchone() == (0,)
