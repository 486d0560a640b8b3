"""Statement building: quoted identifiers in, values as placeholders in the user's parameter style."""

from __future__ import annotations

import sqlite3

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql import statements
from airflow_crashsafe.sql.quoting import Quoter

Q = Quoter("sqlite")


def test_binder_named_style_merges_user_mapping() -> None:
    """With a mapping, crashsafe's values are named crashsafe_p<n> and merged after the user's."""
    b = statements.Binder("postgresql", {"day": "d"})
    assert b.bind(1) == "%(crashsafe_p0)s"
    assert b.bind(None) == "%(crashsafe_p1)s"
    assert b.params() == {"day": "d", "crashsafe_p0": 1, "crashsafe_p1": None}
    assert statements.Binder("sqlite", None).bind(1) == ":crashsafe_p0"


def test_binder_positional_style_appends_after_user_values() -> None:
    """With a sequence, crashsafe's values are positional and come after the user's."""
    b = statements.Binder("postgresql", ["x"])
    assert b.bind(5) == "%s"
    assert b.params() == ["x", 5]
    assert statements.Binder("sqlite", ("x",)).bind(5) == "?"


def test_binder_escapes_percent_only_for_a_postgres_query_without_parameters() -> None:
    """A PostgreSQL query written for no parameters gets % doubled; parameterized ones are left alone."""
    assert statements.Binder("postgresql", None).source("SELECT '5%';") == "SELECT '5%%'"
    assert statements.Binder("postgresql", {}).source("SELECT '5%%'") == "SELECT '5%%'"
    assert statements.Binder("sqlite", None).source("SELECT '5%'") == "SELECT '5%'"


def test_binder_refuses_user_names_in_its_namespace() -> None:
    """User parameters named crashsafe_p* would collide with crashsafe's own and are refused."""
    with pytest.raises(ConfigurationError, match="crashsafe_p"):
        statements.Binder("postgresql", {"crashsafe_p0": 1})


def test_empty_source_is_refused() -> None:
    """A source query of only semicolons and spaces is a configuration error."""
    with pytest.raises(ConfigurationError, match="empty"):
        statements.strip_statement(" ; ;\n")


def test_partition_predicate_binds_values_and_uses_is_null_for_none() -> None:
    """Values become placeholders; a None value becomes IS NULL (never '= NULL')."""
    b = statements.Binder("postgresql", None)
    pred = statements.partition_predicate(
        b, {"day": "2024-01-01", "re'gion": None}, Quoter("postgresql").ident
    )
    assert pred == '"day" = %(crashsafe_p0)s AND "re\'gion" IS NULL'
    assert b.params() == {"crashsafe_p0": "2024-01-01"}


def test_source_ending_in_a_comment_is_still_closed() -> None:
    """The source is wrapped on its own lines, so a trailing -- comment cannot swallow the closing paren."""
    b = statements.Binder("sqlite", None)
    sql = statements.describe_source(b, "SELECT 1 AS a -- trailing comment")
    conn = sqlite3.connect(":memory:")
    cur = conn.execute(sql, b.params())
    assert [d[0] for d in cur.description] == ["a"]


def test_sqlite_overwrite_statements_run() -> None:
    """The SQLite DELETE and INSERT ... RETURNING flag rows outside the partition."""
    conn = sqlite3.connect(":memory:")
    conn.execute('CREATE TABLE "t" ("day" TEXT, "v" INT)')
    conn.execute("INSERT INTO t VALUES ('d1', 1), ('d2', 2)")
    b = statements.Binder("sqlite", None)
    conn.execute(
        statements.delete_partition('"t"', statements.partition_predicate(b, {"day": "d1"}, Q.ident)),
        b.params(),
    )
    b = statements.Binder("sqlite", None)
    sql = statements.insert_partition_returning(
        b,
        '"t"',
        ['"day"', '"v"'],
        "SELECT 'd1' AS day, 5 AS v UNION ALL SELECT 'd3', 6",
        lambda binder: statements.partition_predicate(binder, {"day": "d1"}, Q.ident),
    )
    assert sorted(conn.execute(sql, b.params()).fetchall()) == [(0,), (1,)]


def test_postgres_guarded_insert_shape() -> None:
    """The PostgreSQL insert guards each source row behind OFFSET 0, after the user's placeholders."""
    b = statements.Binder("postgresql", {"x": 1})
    sql = statements.insert_partition_guarded(
        b,
        '"t"',
        ['"day"', '"v"'],
        "SELECT %(x)s AS day, 1 AS v",
        lambda binder: statements.partition_predicate(binder, {"day": 1}, Quoter("postgresql").ident),
    )
    assert "OFFSET 0) AS crashsafe_chk" in sql
    assert 'WHERE 1 / (CASE WHEN ("day" = %(crashsafe_p0)s) IS TRUE THEN 1 ELSE 0 END) = 1' in sql
    assert sql.index("%(x)s") < sql.index("%(crashsafe_p0)s")
    assert b.params() == {"x": 1, "crashsafe_p0": 1}


def test_sqlite_upsert_updates_only_rows_that_differ() -> None:
    """The ON CONFLICT upsert parses on SQLite (WHERE true) and rewrites only changed rows."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v INT)")
    conn.execute("INSERT INTO t VALUES ('a', 1), ('b', 2)")
    conn.execute(
        "CREATE TEMP TABLE s AS SELECT 'a' AS k, 1 AS v UNION ALL SELECT 'b', 3 UNION ALL SELECT 'c', 4"
    )
    sql = statements.upsert("sqlite", '"t"', "temp.s", ['"k"', '"v"'], ['"k"'], ['"v"'])
    assert conn.execute(sql).rowcount == 2  # b updated, c inserted, a untouched
    assert conn.execute("SELECT * FROM t ORDER BY k").fetchall() == [("a", 1), ("b", 3), ("c", 4)]
    assert statements.upsert("sqlite", '"t"', "s", ['"k"'], ['"k"'], []).endswith("DO NOTHING")


def test_merge_statement_shape() -> None:
    """MERGE matches on every key column and updates only when a non-key column differs."""
    sql = statements.merge('"t"', "pg_temp.s", ['"k"', '"v"'], ['"k"'], ['"v"'])
    assert 'ON crashsafe_t."k" = crashsafe_src."k"' in sql
    differs = 'crashsafe_t."v" IS DISTINCT FROM crashsafe_src."v"'
    assert f'WHEN MATCHED AND ({differs}) THEN UPDATE SET "v" = crashsafe_src."v"' in sql
    assert 'WHEN NOT MATCHED THEN INSERT ("k", "v") VALUES (crashsafe_src."k", crashsafe_src."v")' in sql
    assert "WHEN MATCHED" not in statements.merge('"t"', "s", ['"k"'], ['"k"'], [])


def test_source_key_problem_queries() -> None:
    """The duplicate query lists the worst keys first, with their count and the number of repeated keys."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TEMP TABLE s AS SELECT 'a' AS k UNION ALL SELECT 'a' UNION ALL SELECT 'b' "
        "UNION ALL SELECT 'b' UNION ALL SELECT 'b' UNION ALL SELECT NULL"
    )
    nulls, dupes = statements.source_key_problems("temp.s", ['"k"'])
    assert conn.execute(nulls).fetchone() == (1,)
    assert conn.execute(dupes).fetchall() == [("b", 3, 2), ("a", 2, 2)]
