"""The source's column names read from its text on MySQL/MariaDB, so the server never runs it twice."""

from __future__ import annotations

import pytest

from airflow_crashsafe.sql.plans.source import named_columns


@pytest.mark.parametrize(
    ("sql", "names"),
    [
        (
            "SELECT o.day, o.region AS r FROM s.orders AS o CROSS JOIN "
            "(SELECT s.long_work(150, %(day)s, 'd/t') AS done LIMIT 1) AS work WHERE o.day = %(day)s",
            ["day", "r"],
        ),
        ("SELECT %s AS day, coalesce(sum(amount), 0) AS revenue FROM t WHERE day = %s", ["day", "revenue"]),
        ("SELECT 'c1' AS customer, 1 AS amount UNION ALL SELECT 'c2', 2", ["customer", "amount"]),
        ("WITH q AS (SELECT 1 AS a) SELECT a FROM q;", ["a"]),
    ],
)
def test_named_columns_come_from_the_text(sql: str, names: list[str]) -> None:
    """Plain columns and aliases are named as the server would name them, placeholders and all."""
    assert named_columns(sql, "mysql") == names


@pytest.mark.parametrize(
    "sql", ["SELECT * FROM t", "SELECT o.* FROM t AS o", "SELECT a, 1 + 1 FROM t", "not a query (("]
)
def test_anything_else_is_left_to_the_server(sql: str) -> None:
    """A star, an unaliased expression or text sqlglot cannot parse: the server is asked (None)."""
    assert named_columns(sql, "mysql") is None
