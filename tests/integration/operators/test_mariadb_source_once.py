"""On MariaDB the fenced operators run the source query once, constant subqueries included."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_crashsafe.operators import NaturalKeyMergeOperator, PartitionOverwriteOperator
from airflow_crashsafe.testing.context import fake_context
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

# bump() counts its calls in a table; a constant derived table calls it once per evaluation.
SETUP = (
    "CREATE TABLE calls (n INTEGER NOT NULL)",
    "CREATE TABLE totals (day VARCHAR(10) NOT NULL PRIMARY KEY, amount INTEGER NOT NULL)",
    "CREATE FUNCTION bump() RETURNS INTEGER NOT DETERMINISTIC MODIFIES SQL DATA "
    "BEGIN INSERT INTO calls VALUES (1); RETURN 1; END",
)
SOURCE = (
    "SELECT '2024-01-02' AS day, 10 AS amount FROM (SELECT 1 AS one) AS r "
    "CROSS JOIN (SELECT bump() AS done LIMIT 1) AS work"
)


@pytest.fixture
def target(mariadb_url: str, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh MariaDB database with bump() and its call log, as ``crashsafe_target``."""
    found = SqlTarget(
        conn_id=airflow_conn("crashsafe_target", mariadb_url), url=mariadb_url, dialect="mariadb"
    )
    found.run(*SETUP)
    return found


def test_the_merge_evaluates_a_constant_subquery_once(target: SqlTarget) -> None:
    """MariaDB materializes constant derived tables while optimizing, so no LIMIT 0 probe may run it."""
    merge = NaturalKeyMergeOperator(
        task_id="merge", conn_id=target.conn_id, target_table="totals", sql=SOURCE, natural_key=["day"]
    )
    merge.execute(fake_context(task_id="merge"))
    assert target.rows("SELECT day, amount FROM totals") == [("2024-01-02", 10)]
    assert target.rows("SELECT count(*) FROM calls") == [(1,)]


def test_the_overwrite_evaluates_a_constant_subquery_once(target: SqlTarget) -> None:
    """The partition overwrite names the source's columns from its text, then runs it once."""
    overwrite = PartitionOverwriteOperator(
        task_id="load",
        conn_id=target.conn_id,
        target_table="totals",
        partition={"day": "2024-01-02"},
        sql=SOURCE,
    )
    overwrite.execute(fake_context(task_id="load"))
    assert target.rows("SELECT count(*) FROM calls") == [(1,)]
