"""The target table's columns, generated columns and unique keys, from ``information_schema``.

MySQL/MariaDB and DuckDB describe their tables in the SQL-standard ``information_schema``
(PostgreSQL and SQLite are read from their own catalogs in :mod:`.introspect`). Names are bound as
values, never formatted into the SQL. What counts as generated, i.e. a key a re-run cannot find
again: ``AUTO_INCREMENT``, a ``GENERATED ALWAYS AS`` column, and a default that calls a
non-deterministic function (``uuid()``, ``nextval(...)``, ``now()``, ...).
"""

from __future__ import annotations

from typing import Any

from airflow_crashsafe.sql.introspect import Column, TableInfo, UniqueKey
from airflow_crashsafe.sql.nondeterminism import find_nondeterministic
from airflow_crashsafe.sql.quoting import Quoter, TableName, snowflake_shown_name, snowflake_stored_name

__all__ = [
    "describe_duckdb_table",
    "describe_mysql_table",
    "describe_snowflake_table",
    "dialect_nondeterministic_default",
]

# Defaults whose value is new on every insert, in MySQL/MariaDB and DuckDB spelling.
_DIALECT_DEFAULT_CALLS = (
    "uuid(", "uuid_short(", "rand(", "nextval(", "gen_random_uuid(", "sysdate(", "uuid_string(", ".nextval",
)  # fmt: skip


def dialect_nondeterministic_default(default: str | None) -> str | None:
    """Why a column default makes a new value per insert (None: it does not)."""
    if not default:
        return None
    text = str(default)
    calls = find_nondeterministic(text)
    calls += [
        c + ")" if c.endswith("(") else c
        for c in _DIALECT_DEFAULT_CALLS
        if c in text.lower() and c + ")" not in calls
    ]
    return f"default {text} (calls {', '.join(dict.fromkeys(calls))})" if calls else None


_MYSQL_COLUMNS = """
SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_DEFAULT, EXTRA, GENERATION_EXPRESSION
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(%(schema)s, DATABASE()) AND TABLE_NAME = %(table)s
ORDER BY ORDINAL_POSITION"""

_MYSQL_UNIQUE = """
SELECT INDEX_NAME, COLUMN_NAME, SUB_PART
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(%(schema)s, DATABASE()) AND TABLE_NAME = %(table)s AND NON_UNIQUE = 0
ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX"""


def describe_mysql_table(db: Any, table: TableName, unique_keys: bool) -> TableInfo | None:
    """MySQL/MariaDB: ``information_schema.COLUMNS`` and ``STATISTICS`` (unique indexes)."""
    params = {"schema": table.schema, "table": table.table}
    rows = db.execute(_MYSQL_COLUMNS, params).fetchall()
    if not rows:
        return None
    columns = []
    for name, type_, default, extra, generation in rows:
        extra = str(extra or "").lower()
        if "auto_increment" in extra:
            reason: str | None = "an AUTO_INCREMENT column"
        elif "generated" in extra and "default_generated" not in extra:
            reason = f"GENERATED ALWAYS AS ({generation})"
        else:
            reason = dialect_nondeterministic_default(default)
        columns.append(Column(str(name), str(type_), reason))
    keys: dict[str, list[tuple[str | None, Any]]] = {}
    for index, column, sub_part in db.execute(_MYSQL_UNIQUE, params).fetchall() if unique_keys else []:
        keys.setdefault(str(index), []).append((column, sub_part))
    found = [
        UniqueKey(
            "PRIMARY KEY" if index == "PRIMARY" else index,
            tuple(str(c) for c, _ in parts if c is not None),
            primary=index == "PRIMARY",
            # A prefix index (SUB_PART) or a functional one (no column) is not the plain key.
            expression=any(c is None or sub is not None for c, sub in parts),
        )
        for index, parts in keys.items()
    ]
    return TableInfo(table, tuple(columns), tuple(found))


_DUCKDB_COLUMNS = """
SELECT column_name, data_type, column_default, is_generated, generation_expression
FROM information_schema.columns
WHERE table_schema = COALESCE(%(schema)s, current_schema()) AND table_name = %(table)s
ORDER BY ordinal_position"""

_DUCKDB_CONSTRAINTS = """
SELECT constraint_type, constraint_column_names FROM duckdb_constraints()
WHERE schema_name = COALESCE(%(schema)s, current_schema()) AND table_name = %(table)s
  AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"""

_DUCKDB_INDEXES = """
SELECT index_name, expressions FROM duckdb_indexes()
WHERE schema_name = COALESCE(%(schema)s, current_schema()) AND table_name = %(table)s AND is_unique"""


def describe_duckdb_table(db: Any, table: TableName, unique_keys: bool) -> TableInfo | None:
    """DuckDB: ``information_schema.columns``, ``duckdb_constraints()`` and ``duckdb_indexes()``."""
    params = {"schema": table.schema, "table": table.table}
    rows = db.execute(_DUCKDB_COLUMNS, params).fetchall()
    if not rows:
        return None
    columns = []
    for name, type_, default, generated, expression in rows:
        reason = (
            f"GENERATED ALWAYS AS ({expression})"
            if str(generated).upper() == "ALWAYS"
            else dialect_nondeterministic_default(default)
        )
        columns.append(Column(str(name), str(type_), reason))
    keys: list[UniqueKey] = []
    if unique_keys:
        for kind, names in db.execute(_DUCKDB_CONSTRAINTS, params).fetchall():
            primary = kind == "PRIMARY KEY"
            keys.append(UniqueKey(str(kind), tuple(str(n) for n in names), primary=primary))
        known = {c.name for c in columns}
        for index, expressions in db.execute(_DUCKDB_INDEXES, params).fetchall():
            # '[customer, \'"day"\']': names, a keyword quoted in SQL and then as a string.
            parts = [
                p.strip().strip("'").strip('"').replace('""', '"')
                for p in str(expressions).strip("[]").split(",")
            ]
            keys.append(UniqueKey(str(index), tuple(parts), expression=any(p not in known for p in parts)))
    keys.sort(key=lambda k: not k.primary)
    return TableInfo(table, tuple(columns), tuple(keys))


_SNOWFLAKE_COLUMNS = """
SELECT column_name, data_type, column_default, is_identity
FROM information_schema.columns
WHERE table_schema = COALESCE(%(schema)s, CURRENT_SCHEMA()) AND table_name = %(table)s
ORDER BY ordinal_position"""


def describe_snowflake_table(db: Any, table: TableName, unique_keys: bool) -> TableInfo | None:
    """Snowflake: ``information_schema.columns``, then ``SHOW PRIMARY KEYS`` / ``SHOW UNIQUE KEYS``.

    Snowflake records primary and unique keys but does not enforce them: a declared key is what
    tells crashsafe which columns identify a row (docs/databases.md). An IDENTITY/AUTOINCREMENT
    column, or a default calling ``UUID_STRING()`` or a sequence's ``NEXTVAL``, is generated.
    """
    schema = snowflake_stored_name(table.schema) if table.schema else None
    params = {"schema": schema, "table": snowflake_stored_name(table.table)}
    rows = db.execute(_SNOWFLAKE_COLUMNS, params).fetchall()
    if not rows:
        return None
    columns = []
    for name, type_, default, identity in rows:
        identity_column = str(identity or "").upper() == "YES"
        reason = (
            "an IDENTITY/AUTOINCREMENT column"
            if identity_column
            else dialect_nondeterministic_default(default)
        )
        columns.append(Column(snowflake_shown_name(str(name)), str(type_), reason))
    keys: list[UniqueKey] = []
    if unique_keys:
        qualified = Quoter("snowflake").table(table)
        for kind in ("PRIMARY", "UNIQUE"):
            cursor = db.execute(f"SHOW {kind} KEYS IN TABLE {qualified}")
            names = [d[0].lower() for d in cursor.description]
            parts: dict[str, list[tuple[int, str]]] = {}
            for row in cursor.fetchall():
                got = dict(zip(names, row, strict=True))
                parts.setdefault(str(got["constraint_name"]), []).append(
                    (int(got["key_sequence"]), snowflake_shown_name(str(got["column_name"])))
                )
            for constraint, cols in parts.items():
                ordered = tuple(c for _, c in sorted(cols))
                keys.append(UniqueKey(constraint, ordered, primary=kind == "PRIMARY"))
    return TableInfo(table, tuple(columns), tuple(keys))
