"""Detection of non-deterministic calls in SQL text, ignoring comments, strings and quoted names."""

from __future__ import annotations

import pytest

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
