"""The refusals that make a natural-key MERGE safe to re-run, as pure checks over catalog facts.

Each raises an :class:`~airflow_crashsafe.errors.UnsafeWriteError` subclass naming the problem and
the fix, before anything is written: a re-run of an unsafe MERGE double-counts at 03:00, a
refusal at deploy time costs a minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_crashsafe.errors import (
    ConfigurationError,
    DuplicateSourceKeysError,
    GeneratedKeyError,
    NaturalKeyNotUniqueError,
    NondeterministicSourceError,
)
from airflow_crashsafe.sql.introspect import TableInfo
from airflow_crashsafe.sql.nondeterminism import find_nondeterministic
from airflow_crashsafe.sql.quoting import Quoter

__all__ = [
    "check_columns_exist",
    "check_deterministic",
    "check_natural_key",
    "check_source_keys",
    "missing_table_error",
    "source_keys_error",
]


def missing_table_error(table: str, conn_id: str) -> ConfigurationError:
    return ConfigurationError(
        f"Target table {table} does not exist in connection {conn_id!r} (or is not visible on its "
        "search path). Create it first (with the unique key the write relies on), or fix target_table; "
        "write a schema-qualified name as schema.table."
    )


def check_deterministic(
    sql: str,
    *,
    allowed: bool,
    operator: str,
    dialect: str | None = None,
    dialect_calls: Sequence[str] = (),
) -> None:
    """Refuse a source calling now(), random(), nextval(), ... unless explicitly allowed.

    ``dialect`` None (the plan is checked before connecting: the target is not known yet) reads
    the SQL as every supported dialect would, so nothing one of them finds is let through.
    ``dialect_calls``: the target dialect's own such calls, found by parsing ``sql`` in it.
    """
    if allowed:
        return
    calls = list(dict.fromkeys([*find_nondeterministic(sql, dialect), *dialect_calls]))
    if calls:
        raise NondeterministicSourceError(
            f"{operator}: the source query calls {', '.join(calls)}, which returns something new on "
            "every attempt, so a re-run would not write the same rows. Take the value from the run "
            "instead (e.g. a templated {{ data_interval_end }} parameter), or pass "
            "allow_nondeterministic=True if a re-run may legitimately change these rows."
        )


def check_columns_exist(info: TableInfo, columns: Sequence[str], what: str) -> None:
    """Every named column must be a column of the target table."""
    known = set(info.column_names)
    missing = [c for c in columns if c not in known]
    if missing:
        raise ConfigurationError(
            f"{what} {missing} are not columns of {info.name} (its columns: {info.column_names}). "
            "Names are exact and case-sensitive; alias the source columns to the target's names."
        )


def check_natural_key(info: TableInfo, key: Sequence[str], quoter: Quoter) -> None:
    """The key must be exactly a plain unique index / primary key and must not be generated."""
    check_columns_exist(info, key, "Natural key columns")
    generated = [(c, col.generated) for c in key if (col := info.column(c)) and col.generated]
    if generated:
        what = "; ".join(f"{c!r} is {reason}" for c, reason in generated)
        raise GeneratedKeyError(
            f"The natural key of {info.name} uses generated columns: {what}. The database makes a new "
            "value for every insert, so a re-run cannot find the rows an earlier attempt wrote and "
            "inserts them again (double counting). Use a business key that the source query provides "
            "(e.g. order_id, or (customer_id, day)) and back it with a unique index."
        )
    wanted = set(key)
    for unique in info.unique_keys:
        if unique.plain and set(unique.columns) == wanted:
            return
    near = [u for u in info.unique_keys if set(u.columns) == wanted]
    cols = ", ".join(quoter.idents(key))
    index = quoter.ident(f"{info.name.table}_natural_key")
    hint = (
        f" ({', '.join(u.name for u in near)} covers these columns but is partial or on expressions, "
        "which ON CONFLICT cannot use without its WHERE clause)"
        if near
        else ""
    )
    existing = ", ".join(f"{u.name} {list(u.columns)}" for u in info.unique_keys) or "none"
    add = f"CREATE UNIQUE INDEX {index} ON {quoter.table(info.name)} ({cols});"
    if quoter.dialect == "snowflake":  # no unique indexes: a declared key, recorded, not enforced
        add = (
            f"ALTER TABLE {quoter.table(info.name)} ADD PRIMARY KEY ({cols}); (Snowflake does not enforce it)"
        )
    raise NaturalKeyNotUniqueError(
        f"No unique index or primary key of {info.name} is exactly the natural key {list(key)}{hint}; "
        f"its unique keys: {existing}. Without one, two attempts can insert the same key twice and "
        f"ON CONFLICT cannot find the row. Add it: {add}"
    )


def check_source_keys(
    key: Sequence[str], null_rows: int, duplicates: Sequence[Sequence[Any]], distinct_duplicated: int
) -> None:
    """Refuse a source with NULL or repeated natural keys (``duplicates``: key values..., count)."""
    error = source_keys_error(key, null_rows, duplicates, distinct_duplicated)
    if error is not None:
        raise error


def source_keys_error(
    key: Sequence[str], null_rows: int, duplicates: Sequence[Sequence[Any]], distinct_duplicated: int
) -> DuplicateSourceKeysError | None:
    """The error for a source with NULL or repeated natural keys, or None when its keys are fine."""
    if null_rows:
        return DuplicateSourceKeysError(
            f"The source query returned {null_rows} row(s) with a NULL in the natural key {list(key)}; "
            "NULL never matches, so every re-run would insert them again. Filter them out or "
            "COALESCE them to a real value in the source query."
        )
    if duplicates:
        shown = "; ".join(
            f"{dict(zip(key, row[: len(key)], strict=True))} x{row[len(key)]}" for row in duplicates
        )
        return DuplicateSourceKeysError(
            f"The source query returns {distinct_duplicated} natural key(s) {list(key)} more than once "
            f"(first: {shown}). A MERGE cannot decide which row wins; aggregate the source (GROUP BY "
            "the key) or extend the natural key so each row is unique."
        )
    return None
