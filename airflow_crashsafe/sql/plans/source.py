"""What the plans read before writing: the target table's description, the source's columns."""

from __future__ import annotations

import re
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql import checks, statements
from airflow_crashsafe.sql.introspect import TableInfo, describe_table
from airflow_crashsafe.sql.plans import Params
from airflow_crashsafe.sql.quoting import TableName
from airflow_crashsafe.store.dbapi import Db

__all__ = ["describe_target", "named_columns", "query_columns", "source_columns"]

_PLACEHOLDER = re.compile(r"%\(\w+\)s|%s")


def describe_target(db: Db, table: TableName, conn_id: str, *, unique_keys: bool = True) -> TableInfo:
    """The target table's columns (and unique keys); a missing table is a configuration error."""
    info = describe_table(db, table, unique_keys=unique_keys)
    if info is None:
        raise checks.missing_table_error(table.display(), conn_id)
    return info


def query_columns(db: Db, sql: str, parameters: Params) -> list[str]:
    """The source query's column names, from a ``LIMIT 0`` run (PostgreSQL does not run its plan).

    MySQL/MariaDB read them from the query's text when every column is named there: MariaDB
    materializes a constant derived table (``CROSS JOIN (SELECT f() ... LIMIT 1)``) while it
    optimizes, even under ``LIMIT 0``, so asking the server would run such a subquery once more.
    """
    if db.dialect.is_mysql:
        named = named_columns(sql, "mysql")
        if named is not None:
            return _unique(named)
    binder = statements.Binder(db.dialect.name, parameters)
    cursor = db.raw.cursor()
    cursor.execute(statements.describe_source(binder, sql), binder.params())
    if db.dialect.is_snowflake:  # CUSTOMER for an unquoted alias customer: shown as written
        from airflow_crashsafe.sql.quoting import snowflake_shown_name

        return _unique([snowflake_shown_name(str(d[0])) for d in cursor.description or ()])
    return source_columns(cursor)


def named_columns(sql: str, dialect: str) -> list[str] | None:
    """The query's output column names as written, parsed with sqlglot; None unless each is a plain
    column or has an alias (the server names other expressions after its own text of them)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        tree = sqlglot.parse_one(_PLACEHOLDER.sub("NULL", statements.strip_statement(sql)), read=dialect)
    except SqlglotError:
        return None
    if not isinstance(tree, exp.Query):
        return None
    selects, names = tree.selects, tree.named_selects
    plain = all(isinstance(e, exp.Alias) or (isinstance(e, exp.Column) and e.name != "*") for e in selects)
    if not selects or not plain or len(names) != len(selects) or not all(names):
        return None
    return [str(n) for n in names]


def source_columns(cursor: Any) -> list[str]:
    """Column names of the query just run; refuses duplicate names (which column would win?)."""
    return _unique([str(d[0]) for d in cursor.description or ()])


def _unique(names: list[str]) -> list[str]:
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(
            f"The source query returns the column name(s) {dupes} more than once; alias them."
        )
    return names
