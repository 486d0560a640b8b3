"""Read what the safety checks need from the catalog: columns, unique keys, generated columns.

PostgreSQL is read from ``pg_catalog`` (the table is resolved with ``to_regclass`` on the quoted
name, so the search path applies as in a query); SQLite from the ``pragma_table_xinfo`` /
``pragma_index_list`` / ``pragma_index_info`` table-valued functions, with names bound as values;
MySQL/MariaDB and DuckDB from ``information_schema`` (:mod:`.catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.sql.nondeterminism import find_nondeterministic
from airflow_crashsafe.sql.quoting import Quoter, TableName

__all__ = ["Column", "TableInfo", "UniqueKey", "describe_table", "server_version"]


@dataclass(frozen=True)
class Column:
    """A target column; ``generated`` says why its value is made by the database, if it is."""

    name: str
    type: str
    generated: str | None = None


@dataclass(frozen=True)
class UniqueKey:
    """A unique index or primary key usable as an ``ON CONFLICT`` arbiter when plain."""

    name: str
    columns: tuple[str, ...]
    primary: bool = False
    partial: bool = False
    expression: bool = False

    @property
    def plain(self) -> bool:
        """Only plain columns and no WHERE clause: what ``ON CONFLICT (cols)`` can infer."""
        return not (self.partial or self.expression)


@dataclass(frozen=True)
class TableInfo:
    """A table's columns (in order) and unique keys."""

    name: TableName
    columns: tuple[Column, ...]
    unique_keys: tuple[UniqueKey, ...]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)


def server_version(db: Any) -> int:
    """PostgreSQL's ``server_version_num`` (150004) or SQLite's version as a number (3040001)."""
    if db.dialect.is_postgres:
        return int(db.execute("SELECT current_setting('server_version_num')").fetchone()[0])
    major, minor, *rest = (int(p) for p in db.execute("SELECT sqlite_version()").fetchone()[0].split("."))
    return major * 1_000_000 + minor * 1_000 + (rest[0] if rest else 0)


def describe_table(db: Any, table: TableName, *, unique_keys: bool = True) -> TableInfo | None:
    """The table's columns and (unless ``unique_keys=False``) unique keys, or None when it is missing."""
    if db.dialect.is_postgres:
        return _pg_describe(db, table, unique_keys)
    if db.dialect.name in ("mysql", "duckdb", "snowflake"):
        from airflow_crashsafe.sql import catalog  # information_schema readers (they import this module)

        describe = {
            "mysql": catalog.describe_mysql_table,
            "duckdb": catalog.describe_duckdb_table,
            "snowflake": catalog.describe_snowflake_table,
        }[db.dialect.name]
        return describe(db, table, unique_keys)
    return _sqlite_describe(db, table)


def _default_reason(default: str | None, dialect: str) -> str | None:
    if not default:
        return None
    calls = find_nondeterministic(default, dialect)
    return f"default {default} (calls {', '.join(calls)})" if calls else None


_PG_COLUMNS = """
SELECT a.attrelid::oid, a.attname, format_type(a.atttypid, a.atttypmod), a.attidentity,
       a.attgenerated, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = to_regclass(%(name)s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum"""

_PG_UNIQUE = """
SELECT c.relname, i.indisprimary, i.indpred IS NOT NULL, i.indexprs IS NOT NULL,
       ARRAY(SELECT a.attname FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE k.ord <= i.indnkeyatts ORDER BY k.ord)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = %(oid)s AND i.indisunique AND i.indisvalid AND i.indimmediate
ORDER BY i.indisprimary DESC, c.relname"""


def _pg_describe(db: Any, table: TableName, unique_keys: bool) -> TableInfo | None:
    # The table is resolved by to_regclass on its quoted name (bound as a value), as a query would.
    rows = db.execute(_PG_COLUMNS, {"name": Quoter.for_db(db).table(table)}).fetchall()
    if not rows:  # no such table (or a table without columns, which cannot be a target either)
        return None
    oid = int(rows[0][0])
    columns = []
    for _, name, type_, identity, generated, default in rows:
        reason = None
        if identity:
            reason = "an identity column (GENERATED {} AS IDENTITY)".format(
                "ALWAYS" if identity == "a" else "BY DEFAULT"
            )
        elif generated:
            reason = f"GENERATED ALWAYS AS ({default}) STORED"
        else:
            reason = _default_reason(default, "postgres")
        columns.append(Column(str(name), str(type_), reason))
    found = db.execute(_PG_UNIQUE, {"oid": oid}).fetchall() if unique_keys else []
    keys = [
        UniqueKey(str(name), tuple(str(c) for c in cols), bool(primary), bool(partial), bool(expr))
        for name, primary, partial, expr, cols in found
    ]
    return TableInfo(table, tuple(columns), tuple(keys))


def _sqlite_describe(db: Any, table: TableName) -> TableInfo | None:
    schema = table.schema or "main"
    raw = db.raw
    try:
        xinfo = raw.execute("SELECT * FROM pragma_table_xinfo(?, ?)", (table.table, schema)).fetchall()
    except Exception as exc:  # unknown database (schema) name
        if "unknown database" in str(exc):
            return None
        raise
    if not xinfo:
        return None
    indexes = raw.execute(
        'SELECT name, "unique", origin, partial FROM pragma_index_list(?, ?)', (table.table, schema)
    ).fetchall()
    pk_cols = [(r[5], r[1], r[2]) for r in xinfo if r[5]]  # (pk position, name, declared type)
    has_pk_index = any(origin == "pk" for _, _, origin, _ in indexes)
    rowid_alias = len(pk_cols) == 1 and str(pk_cols[0][2]).upper() == "INTEGER" and not has_pk_index
    autoincrement = rowid_alias and _sqlite_autoincrement(raw, table.table, schema)
    columns = []
    for _cid, name, type_, _notnull, default, pk, hidden in xinfo:
        reason = None
        if hidden in (2, 3):
            reason = "GENERATED ALWAYS AS (...) {}".format("STORED" if hidden == 3 else "VIRTUAL")
        elif rowid_alias and pk:
            reason = "an INTEGER PRIMARY KEY{} (an alias of SQLite's rowid, assigned on insert)".format(
                " AUTOINCREMENT" if autoincrement else ""
            )
        else:
            reason = _default_reason(default, "sqlite")
        columns.append(Column(str(name), str(type_ or ""), reason))
    keys = []
    if rowid_alias:
        keys.append(UniqueKey("PRIMARY KEY", (str(pk_cols[0][1]),), primary=True))
    for name, unique, origin, partial in indexes:
        if not unique:
            continue
        info = raw.execute("SELECT cid, name FROM pragma_index_info(?, ?) ORDER BY seqno", (name, schema))
        cols = info.fetchall()
        keys.append(
            UniqueKey(
                str(name),
                tuple(str(c[1]) for c in cols if c[1] is not None),
                primary=origin == "pk",
                partial=bool(partial),
                expression=any(c[1] is None for c in cols),
            )
        )
    keys.sort(key=lambda k: not k.primary)
    return TableInfo(table, tuple(columns), tuple(keys))


def _sqlite_autoincrement(raw: Any, table: str, schema: str) -> bool:
    from airflow_crashsafe.sql.quoting import sqlite_quote

    row = raw.execute(
        f"SELECT sql FROM {sqlite_quote(schema)}.sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return bool(row and row[0] and "AUTOINCREMENT" in row[0].upper())
