"""Detection of non-deterministic calls in SQL text, ignoring comments, strings and quoted names."""

from __future__ import annotations

import contextlib

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql.nondeterminism import find_nondeterministic, strip_sql


@pytest.mark.parametrize(
    ("sql", "found"),
    [
        ("SELECT now()", ["now()"]),
        ("SELECT NOW ( )", ["now()"]),
        ("SELECT pg_catalog.now()", ["now()"]),
        (
            "SELECT current_timestamp, current_date, current_time",
            ["current_timestamp", "current_date", "current_time"],
        ),
        ("SELECT CURRENT_TIMESTAMP(3)", ["current_timestamp"]),
        ("SELECT localtime, localtimestamp", ["localtime", "localtimestamp"]),
        (
            "SELECT clock_timestamp(), statement_timestamp(), transaction_timestamp()",
            ["clock_timestamp()", "statement_timestamp()", "transaction_timestamp()"],
        ),
        ("SELECT timeofday()", ["timeofday()"]),
        ("SELECT random(), setseed(0.5)", ["random()", "setseed()"]),
        ("SELECT nextval('s'), currval('s')", ["nextval()", "currval()"]),
        (
            "SELECT gen_random_uuid(), uuid_generate_v1(), uuid_generate_v4()",
            ["gen_random_uuid()", "uuid_generate_v1()", "uuid_generate_v4()"],
        ),
        ("SELECT randomblob(16)", ["randomblob()"]),
        ("SELECT datetime('now')", ["datetime('now')"]),
        ("SELECT date('NOW', '-1 day')", ["date('now')"]),
        ("SELECT strftime('%Y', 'now')", ["strftime('now')"]),
        ("SELECT date()", ["date()"]),
        ("SELECT 'now'::timestamptz", ["'now'"]),
        ("SELECT now(), now()", ["now()"]),
    ],
)
def test_detects(sql: str, found: list[str]) -> None:
    """Each clock, random, sequence and uuid call is named, once, in order of appearance."""
    assert find_nondeterministic(sql) == found


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT pg_sleep(1)",
        "SELECT 1 -- now()",
        "SELECT 1 /* random() */",
        "SELECT 1 /* outer /* nested now() */ still comment random() */",
        "SELECT 'now()', 'random()', 'current_date'",
        "SELECT 'it''s now()'",
        "SELECT E'it\\'s now()'",
        "SELECT $$ now() $$, $tag$ random() $tag$",
        'SELECT "now", "random" FROM t',
        "SELECT t.current_date_col, my_now(), nowhere, random_value FROM t",
        "SELECT date('2024-01-01'), datetime(day)",
        "SELECT 'snow' AS s, 'now is the time' AS t",
        "-- datetime('now')\nSELECT 1",
    ],
)
def test_ignores(sql: str) -> None:
    """Comments, string literals, dollar quotes, quoted names and look-alike names are not calls."""
    assert find_nondeterministic(sql) == []


def test_strip_keeps_now_literal_and_blanks_the_rest() -> None:
    """Stripping removes comments, blanks strings and quoted names, but keeps a 'now' literal visible."""
    assert strip_sql("SELECT 'x', \"y\", 'Now' -- c\n/* d */") == "SELECT '',  _ , 'now'  \n "


@pytest.mark.parametrize(
    ("sql", "found"),
    [
        ('SELECT "now"()', ["now()"]),
        ('SELECT pg_catalog."random"()', ["random()"]),
        ("SELECT 'today'::date", ["'today'"]),
        ("SELECT CAST('yesterday' AS date)", ["'yesterday'"]),
        ("SELECT DATE 'tomorrow', TIMESTAMP ' Now '", ["'tomorrow'", "'now'"]),
        ("SELECT * FROM t TABLESAMPLE BERNOULLI (10)", ["tablesample"]),
        ("SELECT * FROM t TABLESAMPLE SYSTEM (10) WHERE x > 1", ["tablesample"]),
        ("SELECT * FROM {{ params.table }} t WHERE d = {{ ds }} AND x = now()", ["now()"]),
    ],
)
def test_detects_what_a_lexer_of_names_missed(sql: str, found: list[str]) -> None:
    """Quoted and schema-qualified calls, 'today'-like date strings and unseeded TABLESAMPLE are named."""
    assert find_nondeterministic(sql) == found


def test_seeded_tablesample_repeats() -> None:
    """TABLESAMPLE ... REPEATABLE (seed) picks the same rows on every attempt, so it is allowed."""
    assert find_nondeterministic("SELECT * FROM t TABLESAMPLE SYSTEM (10) REPEATABLE (42)") == []


@pytest.mark.parametrize(
    ("sql", "dialect", "found"),
    [
        (
            "SELECT RAND(), UUID(), SYSDATE(), CURDATE(), UTC_TIMESTAMP()",
            "mysql",
            ["rand()", "uuid()", "sysdate()", "curdate()", "utc_timestamp()"],
        ),
        ("SELECT UNIX_TIMESTAMP(), UNIX_TIMESTAMP(ts) FROM t", "mysql", ["unix_timestamp()"]),
        ("SELECT 'it\\'s now()' # random()\n, `now`()", "mysql", ["now()"]),
        ('SELECT "now" AS label', "mysql", []),
        ("SELECT 1 /* a /* b */ random()", "mysql", ["random()"]),
        ("SELECT 1 /* a /* b */ random() */", "postgres", []),
        ("SELECT datetime('now'), last_insert_rowid()", "sqlite", ["datetime('now')", "last_insert_rowid()"]),
        ("SELECT 'today' AS label", "sqlite", []),
        ("SELECT 'today' AS label", "postgresql", ["'today'"]),
        ("SELECT rand()", "mariadb", ["rand()"]),
    ],
)
def test_dialects(sql: str, dialect: str, found: list[str]) -> None:
    """Each dialect's comments, strings, quoted names and clock functions are read as that dialect does."""
    assert find_nondeterministic(sql, dialect) == found


def test_unknown_target_reads_every_dialect() -> None:
    """With no dialect (the target is not known yet), a call any supported dialect sees is named."""
    assert find_nondeterministic("SELECT 1 /* a /* b */ random() */, 'today'", None) == [
        "random()",
        "'today'",
    ]


def test_unknown_dialect_and_unreadable_sql_are_configuration_errors() -> None:
    """An unsupported dialect, or SQL no dialect can tokenize, is a one-line ConfigurationError."""
    with pytest.raises(ConfigurationError, match="use one of"):
        find_nondeterministic("SELECT 1", "oracle")
    with pytest.raises(ConfigurationError, match="unterminated"):
        find_nondeterministic("SELECT 'abc", None)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT rand(), 'today' /* plain */ -- comment\nFROM t",
        "SELECT 1 /* a /* b */ random()",
        "SELECT 'a\\' , now() -- '",
        "SELECT 1 --now()\n",
        'SELECT "x" # now()\n',
    ],
)
def test_unknown_target_reads_once_only_when_every_dialect_would_read_alike(sql: str) -> None:
    """SQL every dialect lexes alike is read once; what the one reading finds is what all three find."""
    union: list[str] = []
    for dialect in ("postgres", "sqlite", "mysql"):
        with contextlib.suppress(ConfigurationError):  # a dialect that cannot read it finds nothing
            union += [c for c in find_nondeterministic(sql, dialect) if c not in union]
    assert sorted(find_nondeterministic(sql, None)) == sorted(union)
