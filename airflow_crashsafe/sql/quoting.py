"""Quote user-given table and column names so that no name can ever be read as SQL.

Names written by users are identifiers, never SQL: every one is quoted with the driver's own
identifier quoting (``psycopg.sql.Identifier`` on PostgreSQL; the standard ``"…"`` with doubled
inner quotes on SQLite; sqlglot's for MySQL/MariaDB and DuckDB), so ``revenue; DROP TABLE x``
is one odd (and missing) table name.

How table names are written (:func:`parse_table_name`):

* ``revenue`` or ``mart.revenue``: a table, optionally schema-qualified (on SQLite the "schema"
  is an attached database: ``main``, ``temp``, ...). Parts are split on dots.
* A part that itself contains a dot (or starts with a double quote) is written in double quotes,
  SQL style, with an inner ``"`` doubled: ``"my.schema"."odd""name"``.
* Names are exact: quoting keeps their case, so ``Mart.Revenue`` is not ``mart.revenue`` on
  PostgreSQL (write the name as the catalog stores it, i.e. lower case for unquoted DDL).

Column names are single identifiers and are never split: ``a.b`` is one column named ``a.b``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "Quoter",
    "TableName",
    "parse_table_name",
    "snowflake_shown_name",
    "snowflake_stored_name",
    "sqlite_quote",
]


@dataclass(frozen=True)
class TableName:
    """A parsed, possibly schema-qualified table name; each part is exact, unquoted text."""

    parts: tuple[str, ...]

    @property
    def table(self) -> str:
        return self.parts[-1]

    @property
    def schema(self) -> str | None:
        return self.parts[0] if len(self.parts) == 2 else None

    def display(self) -> str:
        """The canonical spelling: parts joined by dots, quoted only where a part needs it."""
        return ".".join(_display_part(p) for p in self.parts)

    def __str__(self) -> str:
        return self.display()


def _display_part(part: str) -> str:
    if "." in part or part.startswith('"') or part != part.strip():
        return sqlite_quote(part)
    return part


def _check_identifier(name: str, what: str) -> str:
    if not isinstance(name, str) or name == "":
        raise ConfigurationError(f"{what} must be a non-empty string, got {name!r}.")
    if "\x00" in name:
        raise ConfigurationError(f"{what} {name!r} contains a NUL character, which no database allows.")
    return name


def parse_table_name(name: str) -> TableName:
    """Split ``schema.table`` on dots; double-quoted parts may contain dots (see module doc)."""
    text = _check_identifier(name, "A table name").strip()
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i < n and text[i] == '"':
            buf: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise ConfigurationError(
                        f"Table name {name!r} has an unclosed double quote; write a quoted part "
                        'as "name" and double any quote inside it ("a""b").'
                    )
                if text[i] == '"':
                    if i + 1 < n and text[i + 1] == '"':
                        buf.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                buf.append(text[i])
                i += 1
            part = "".join(buf)
            while i < n and text[i].isspace():
                i += 1
            if i < n and text[i] != ".":
                raise ConfigurationError(
                    f"Table name {name!r}: a quoted part must be followed by a dot or end the name."
                )
        else:
            end = text.find(".", i)
            end = n if end < 0 else end
            part = text[i:end].strip()  # whitespace around dots is insignificant, as in SQL
            i = end
        if part == "":
            raise ConfigurationError(
                f"Table name {name!r} has an empty part; write 'table' or 'schema.table' and quote "
                'parts containing dots ("my.schema".table).'
            )
        parts.append(part)
        if i >= n:
            break
        i += 1  # the dot
        if i >= n:
            raise ConfigurationError(f"Table name {name!r} ends with a dot.")
    if len(parts) > 2:
        raise ConfigurationError(
            f"Table name {name!r} has {len(parts)} parts; crashsafe accepts 'table' or "
            "'schema.table' (quote a part that contains a dot)."
        )
    return TableName(tuple(parts))


_SNOWFLAKE_UNQUOTED = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")


def snowflake_stored_name(name: str) -> str:
    """The name Snowflake stores for ``name`` as a user writes it unquoted in SQL.

    Snowflake folds an unquoted identifier to upper case (``revenue`` is ``REVENUE``); crashsafe
    quotes every identifier, so a plain name is folded first, as Snowflake would. Any other name
    (with spaces, quotes, semicolons, ...) could only have been created quoted and is kept as is.
    """
    return name.upper() if _SNOWFLAKE_UNQUOTED.fullmatch(name) else name


def snowflake_shown_name(stored: str) -> str:
    """How crashsafe shows a name Snowflake stored: a plain upper-case one as it is written unquoted.

    Snowflake matches unquoted names case-insensitively (it stores ``REVENUE`` for ``revenue``), so
    crashsafe compares the names users give (``natural_key=["customer"]``) in lower case;
    :func:`snowflake_stored_name` folds them back when quoting.
    """
    return stored.lower() if _SNOWFLAKE_UNQUOTED.fullmatch(stored) and stored == stored.upper() else stored


def sqlite_quote(name: str) -> str:
    """SQL-standard identifier quoting, as SQLite documents it: wrap in ``"``, double inner ``"``."""
    return '"' + name.replace('"', '""') + '"'


class Quoter:
    """Quotes identifiers the way the connection's driver does."""

    def __init__(self, dialect: str, raw: Any = None) -> None:
        self.dialect = dialect
        self._raw = raw

    @classmethod
    def for_db(cls, db: Any) -> Quoter:
        """The quoter for a :class:`~airflow_crashsafe.store.dbapi.Db`."""
        return cls(db.dialect.name, db.raw)

    def ident(self, name: str) -> str:
        """One identifier (a column, a schema, a table without its schema)."""
        _check_identifier(name, "An identifier")
        if self.dialect in ("mysql", "duckdb", "snowflake"):
            from airflow_crashsafe.store.dialects import dialect_named

            if self.dialect == "snowflake":
                name = snowflake_stored_name(name)
            return dialect_named(self.dialect).ident(name)  # sqlglot's quoting (`...` on MySQL)
        if self.dialect != "postgresql":
            return sqlite_quote(name)
        return self._pg_quote(name)

    def _pg_quote(self, name: str) -> str:
        raw = self._raw
        if raw is not None and type(raw).__module__.startswith("psycopg2"):
            extensions = import_module("psycopg2.extensions")  # psycopg2 has no type stubs
            return str(extensions.quote_ident(name, raw))
        from psycopg import sql

        context = raw if raw is not None and type(raw).__module__.startswith("psycopg") else None
        return sql.Identifier(name).as_string(context)

    def table(self, table: TableName) -> str:
        """A (possibly schema-qualified) table name."""
        return ".".join(self.ident(p) for p in table.parts)

    def idents(self, names: Iterable[str]) -> list[str]:
        return [self.ident(n) for n in names]
