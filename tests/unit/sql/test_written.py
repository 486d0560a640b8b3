"""Which tables a user's statement changes, read from its text: what the fence's table check sees."""

from __future__ import annotations

import pytest

from airflow_crashsafe.sql.written import view_tables, written_tables

MYSQL = [
    ("INSERT INTO a (x) SELECT y FROM b", [("a",)]),
    ("INSERT IGNORE INTO mart.a VALUES (%(crashsafe_token)s, %s)", [("mart", "a")]),
    ("INSERT INTO a SELECT * FROM b ON DUPLICATE KEY UPDATE x = VALUES(x)", [("a",)]),
    ("WITH c AS (SELECT 1) INSERT INTO a SELECT * FROM c", [("a",)]),
    ("REPLACE INTO a VALUES (1)", [("a",)]),
    ("REPLACE LOW_PRIORITY INTO `we ird`.`t` VALUES (1)", [("we ird", "t")]),
    ("UPDATE a JOIN b ON a.id = b.id SET a.x = 1, b.y = 2", [("a",), ("b",)]),
    ("UPDATE a SET x = (SELECT max(y) FROM b)", [("a",)]),
    ("UPDATE a JOIN (SELECT id FROM c) AS s ON a.id = s.id SET a.x = 1", [("a",)]),
    ("DELETE FROM a WHERE x IN (SELECT x FROM c)", [("a",)]),
    ("DELETE a, b FROM a JOIN b ON a.i = b.i", [("a",), ("b",)]),
    ("DELETE t1 FROM a AS t1 JOIN b ON t1.i = b.i", [("a",)]),
    ("SELECT * FROM a FOR UPDATE", []),
    ("SELECT x INTO @v FROM a", []),
    ("SET @x = 1", []),
    ("CREATE TEMPORARY TABLE t AS SELECT * FROM b", []),
    ("DROP TEMPORARY TABLE t", []),
]
UNKNOWN = [
    "CALL load_day(1)",
    "LOAD DATA INFILE 'x' INTO TABLE a",
    "DO RELEASE_LOCK('x')",
    "SELECT x INTO OUTFILE '/tmp/f' FROM a",
    "TRUNCATE a",
    "CREATE TABLE t (x INT)",
    "INSERT INTO a VALUES (1); INSERT INTO b VALUES (2)",
    "this is not SQL",
]


@pytest.mark.parametrize(("stmt", "tables"), MYSQL)
def test_the_tables_a_mysql_statement_changes(stmt: str, tables: list[tuple[str, ...]]) -> None:
    """Only the tables written count (a source or subquery is read, which is safe on any engine)."""
    written = written_tables("mysql", [stmt])
    assert [t.parts for _, t in written.tables] == tables
    assert written.unknown == ()


@pytest.mark.parametrize("stmt", UNKNOWN)
def test_a_statement_whose_tables_cannot_be_read_is_unknown(stmt: str) -> None:
    """A CALL, LOAD DATA, DDL or unparsable text names no tables crashsafe can trust: unknown."""
    written = written_tables("mysql", ["INSERT INTO ok VALUES (1)", stmt])
    assert written.unknown == (2,)
    assert [(n, t.parts) for n, t in written.tables] == [(1, ("ok",))]


def test_postgres_statements_and_a_select_into_that_makes_a_table() -> None:
    """PostgreSQL's UPDATE ... FROM and DELETE ... USING change their first table; MERGE its target;
    SELECT ... INTO makes a table, so it is unknown."""
    written = written_tables(
        "postgres",
        [
            'INSERT INTO "Mart"."Rev" VALUES (1)',
            "UPDATE a SET x = 1 FROM b WHERE a.i = b.i",
            "DELETE FROM a USING b WHERE a.i = b.i",
            "MERGE INTO t USING s ON t.k = s.k WHEN MATCHED THEN UPDATE SET v = s.v",
            "SELECT * INTO fresh FROM a",
        ],
    )
    assert [(n, t.parts) for n, t in written.tables] == [
        (1, ("Mart", "Rev")),
        (2, ("a",)),
        (3, ("a",)),
        (4, ("t",)),
    ]
    assert written.unknown == (5,)


def test_a_view_definition_names_every_table_under_it() -> None:
    """MariaDB's stored definition (qualified, back-quoted): joins and subqueries included, CTEs not."""
    definition = (
        "with w as (select 1 AS `one`) select `shop`.`m`.`k` AS `k` from `shop`.`m` "
        "join `x` on 1 where `k` in (select 1 from `y`) and `k` in (select `one` from `w`)"
    )
    found = view_tables("mysql", definition)
    assert found is not None
    assert [t.parts for t in found] == [("shop", "m"), ("x",), ("y",)]
    assert view_tables("mysql", "not a query at all (") is None
