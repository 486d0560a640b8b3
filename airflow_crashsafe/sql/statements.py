"""Build the fenced operators' statements from quoted identifiers and bound values.

Every identifier reaching these builders is already quoted (:mod:`.quoting`); every value becomes
a placeholder through a :class:`Binder`, which matches the user's own parameter style so one
statement can carry both the user's source query and crashsafe's values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "GUARD_ALIAS",
    "SOURCE_ALIAS",
    "TARGET_ALIAS",
    "Binder",
    "count_outside_partition",
    "delete_partition",
    "describe_source",
    "insert_partition_guarded",
    "insert_partition_returning",
    "materialize_source",
    "merge",
    "partition_predicate",
    "source_key_problems",
    "strip_statement",
    "upsert",
]

SOURCE_ALIAS = "crashsafe_src"
TARGET_ALIAS = "crashsafe_t"
GUARD_ALIAS = "crashsafe_chk"
_PREFIX = "crashsafe_p"


def strip_statement(sql: str) -> str:
    """The user's query without trailing semicolons/whitespace, so it can be a subquery."""
    text = sql.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    if not text:
        raise ConfigurationError("The source query is empty; give a SELECT that returns the rows to write.")
    return text


class Binder:
    """Crashsafe's values as placeholders in the user's parameter style, then the combined params.

    With mapping (or no) user parameters, crashsafe's values are named ``crashsafe_p<n>``; with a
    sequence they are positional and must come after every user placeholder in the statement.
    On PostgreSQL, a user query written for no parameters gets its ``%`` doubled, because the
    combined statement is executed with parameters (``%`` would otherwise start a placeholder).
    """

    def __init__(self, dialect: str, user_params: Mapping[str, Any] | Sequence[Any] | None) -> None:
        self.dialect = dialect
        self.user_params = user_params
        self.positional = user_params is not None and not isinstance(user_params, Mapping)
        self._values: list[Any] = []
        if isinstance(user_params, Mapping):
            clash = [k for k in user_params if str(k).startswith(_PREFIX)]
            if clash:
                raise ConfigurationError(
                    f"Parameter names starting with {_PREFIX!r} are crashsafe's own: rename {clash}."
                )

    def bind(self, value: Any) -> str:
        """A placeholder for ``value``."""
        self._values.append(value)
        pyformat = self.dialect in ("postgresql", "mysql", "snowflake")
        if self.positional:
            return "%s" if pyformat else "?"
        name = f"{_PREFIX}{len(self._values) - 1}"
        if self.dialect == "duckdb":
            return f"${name}"
        return f"%({name})s" if pyformat else f":{name}"

    def source(self, sql: str) -> str:
        """The user's query, ready to be embedded in a statement executed with parameters."""
        text = strip_statement(sql)
        if self.dialect in ("postgresql", "mysql", "snowflake") and self.user_params is None:
            text = text.replace("%", "%%")
        return text

    def params(self) -> dict[str, Any] | list[Any]:
        """The parameters for the combined statement: the user's, then crashsafe's."""
        if self.positional:
            return [*(self.user_params or ()), *self._values]
        own = {f"{_PREFIX}{i}": v for i, v in enumerate(self._values)}
        return {**dict(self.user_params or {}), **own}


def describe_source(binder: Binder, sql: str) -> str:
    """A query returning no rows but the source's column names (``cursor.description``)."""
    return f"SELECT * FROM (\n{binder.source(sql)}\n) AS {SOURCE_ALIAS} LIMIT 0"


def partition_predicate(binder: Binder, partition: Mapping[str, Any], quote: Callable[[str], str]) -> str:
    """``"col" = <value> AND ...``; a None value is ``IS NULL`` (NULL never equals NULL)."""
    terms = []
    for column, value in partition.items():
        q = quote(column)
        terms.append(f"{q} IS NULL" if value is None else f"{q} = {binder.bind(value)}")
    return " AND ".join(terms)


def delete_partition(table: str, predicate: str) -> str:
    return f"DELETE FROM {table} WHERE {predicate}"


def insert_partition_guarded(
    binder: Binder, table: str, columns: Sequence[str], sql: str, predicate_of: Callable[[Binder], str]
) -> str:
    """PostgreSQL: insert the source; a row outside the partition makes it fail (division by zero).

    The guard costs one comparison per row (measured: within noise of a plain INSERT at 100k rows,
    where a ``WITH ins AS (INSERT ... RETURNING) SELECT count(*) ...`` check cost ~10 % of the
    INSERT's CPU). ``OFFSET 0`` keeps it from being pushed into the user's query, so it only sees
    the rows the query returns. The caller runs it under a savepoint and, on division by zero,
    counts the stray rows with :func:`count_outside_partition` (or re-raises the user's own error).
    """
    cols = ", ".join(columns)
    source = binder.source(sql)  # user placeholders come before crashsafe's in the text
    predicate = predicate_of(binder)
    return (
        f"INSERT INTO {table} ({cols})\nSELECT {cols} FROM (SELECT * FROM (\n{source}\n) AS {SOURCE_ALIAS} "
        f"OFFSET 0) AS {GUARD_ALIAS}\nWHERE 1 / (CASE WHEN ({predicate}) IS TRUE THEN 1 ELSE 0 END) = 1"
    )


def count_outside_partition(binder: Binder, sql: str, predicate_of: Callable[[Binder], str]) -> str:
    """(rows of the source, rows outside the partition): the diagnosis after a guard fired.

    The source comes first in the text (a CTE), so that with positional parameters the user's
    placeholders precede crashsafe's, as :meth:`Binder.params` orders the values.
    """
    source = binder.source(sql)
    predicate = predicate_of(binder)
    outside = f"count(*) FILTER (WHERE ({predicate}) IS NOT TRUE)"
    return f"WITH {SOURCE_ALIAS} AS (\n{source}\n) SELECT count(*), {outside} FROM {SOURCE_ALIAS}"


def insert_partition_returning(
    binder: Binder, table: str, columns: Sequence[str], sql: str, predicate_of: Callable[[Binder], str]
) -> str:
    """SQLite (no RETURNING in CTEs): insert the source, one row per insert saying 1 if outside."""
    cols = ", ".join(columns)
    source = binder.source(sql)
    predicate = predicate_of(binder)
    return (
        f"INSERT INTO {table} ({cols})\nSELECT {cols} FROM (\n{source}\n) AS {SOURCE_ALIAS} WHERE true\n"
        f"RETURNING ({predicate}) IS NOT TRUE"
    )


def materialize_source(binder: Binder, temp_table: str, sql: str) -> str:
    """Run the source once into a temporary table, so checks and MERGE read the very same rows.

    On MySQL/MariaDB it is InnoDB whatever the server's default engine: changes to a table of
    another engine survive a rollback and would read as a write that could not be undone.
    """
    suffix = {"postgresql": " ON COMMIT DROP", "mysql": " ENGINE=InnoDB"}.get(binder.dialect, "")
    source = binder.source(sql)
    return f"CREATE TEMPORARY TABLE {temp_table}{suffix} AS SELECT * FROM (\n{source}\n) AS {SOURCE_ALIAS}"


def source_key_problems(source: str, keys: Sequence[str], limit: int = 5) -> tuple[str, str]:
    """(count of rows with a NULL key, the most repeated keys with counts and how many repeat)."""
    null_any = " OR ".join(f"{k} IS NULL" for k in keys)
    key_list = ", ".join(keys)
    nulls = f"SELECT count(*) FROM {source} WHERE {null_any}"
    dupes = (
        f"SELECT {key_list}, count(*) AS crashsafe_n, count(*) OVER () AS crashsafe_keys FROM {source} "
        f"GROUP BY {key_list} HAVING count(*) > 1 ORDER BY crashsafe_n DESC, {key_list} LIMIT {int(limit)}"
    )
    return nulls, dupes


def _differs(dialect: str, left: str, right: str) -> str:
    op = "IS DISTINCT FROM" if dialect in ("postgresql", "duckdb") else "IS NOT"
    return f"{left} {op} {right}"


def merge(
    table: str, source: str, columns: Sequence[str], keys: Sequence[str], update_columns: Sequence[str]
) -> str:
    """PostgreSQL >= 15: MERGE on the natural key, updating only rows that differ."""
    t, s = TARGET_ALIAS, SOURCE_ALIAS
    on = " AND ".join(f"{t}.{k} = {s}.{k}" for k in keys)
    parts = [f"MERGE INTO {table} AS {t}\nUSING {source} AS {s}\nON {on}"]
    if update_columns:
        differs = " OR ".join(_differs("postgresql", f"{t}.{c}", f"{s}.{c}") for c in update_columns)
        sets = ", ".join(f"{c} = {s}.{c}" for c in update_columns)
        parts.append(f"WHEN MATCHED AND ({differs}) THEN UPDATE SET {sets}")
    values = ", ".join(f"{s}.{c}" for c in columns)
    parts.append(f"WHEN NOT MATCHED THEN INSERT ({', '.join(columns)}) VALUES ({values})")
    return "\n".join(parts)


def upsert(
    dialect: str,
    table: str,
    source: str,
    columns: Sequence[str],
    keys: Sequence[str],
    update_columns: Sequence[str],
) -> str:
    """``INSERT ... ON CONFLICT (keys) DO UPDATE`` (PostgreSQL < 15, SQLite).

    ``WHERE true`` keeps SQLite's parser from reading ``ON CONFLICT`` as a join constraint.
    """
    t = TARGET_ALIAS
    cols = ", ".join(columns)
    head = (
        f"INSERT INTO {table} AS {t} ({cols})\nSELECT {cols} FROM {source} AS {SOURCE_ALIAS} WHERE true\n"
        f"ON CONFLICT ({', '.join(keys)}) DO "
    )
    if not update_columns:
        return head + "NOTHING"
    sets = ", ".join(f"{c} = excluded.{c}" for c in update_columns)
    differs = " OR ".join(_differs(dialect, f"{t}.{c}", f"excluded.{c}") for c in update_columns)
    return head + f"UPDATE SET {sets}\nWHERE {differs}"
