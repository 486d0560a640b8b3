"""What the plans read before writing: the target table's description, the source's columns."""

from __future__ import annotations

from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql import checks, statements
from airflow_crashsafe.sql.introspect import TableInfo, describe_table
from airflow_crashsafe.sql.plans import Params
from airflow_crashsafe.sql.quoting import TableName
from airflow_crashsafe.store.dbapi import Db

__all__ = ["describe_target", "query_columns", "source_columns"]


def describe_target(db: Db, table: TableName, conn_id: str, *, unique_keys: bool = True) -> TableInfo:
    """The target table's columns (and unique keys); a missing table is a configuration error."""
    info = describe_table(db, table, unique_keys=unique_keys)
    if info is None:
        raise checks.missing_table_error(table.display(), conn_id)
    return info


def query_columns(db: Db, sql: str, parameters: Params) -> list[str]:
    """The source query's column names, from a ``LIMIT 0`` run (PostgreSQL does not run its plan)."""
    binder = statements.Binder(db.dialect.name, parameters)
    cursor = db.raw.cursor()
    cursor.execute(statements.describe_source(binder, sql), binder.params())
    return source_columns(cursor)


def source_columns(cursor: Any) -> list[str]:
    """Column names of the query just run; refuses duplicate names (which column would win?)."""
    names = [str(d[0]) for d in cursor.description or ()]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(
            f"The source query returns the column name(s) {dupes} more than once; alias them."
        )
    return names
