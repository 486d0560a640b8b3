"""Refuse, before anything is written, a fenced write to a table the fence cannot protect.

The fence decides at the end of the write's transaction whether it commits, so whatever the write
changed must roll back with that transaction (docs/databases.md, "Tables a fence can protect"):

- **MySQL/MariaDB**: a table on any storage engine but InnoDB (``information_schema.TABLES``;
  the rule and its wording: :mod:`airflow_crashsafe.store.mysql_engines`); a view is checked
  through every table its definition names; a ``SEQUENCE`` is refused. crashsafe's fence table is
  checked with every write's tables, in the same round trip;
- **PostgreSQL**: a foreign table, or a partitioned table with a foreign partition (the write goes
  to another server, outside the transaction), and an unlogged table or partition (a server crash
  empties it while the fence row, which is logged, still says committed);
- SQLite, DuckDB and Snowflake: every table takes part in the database's transactions.

Which tables: each caller names them (:class:`Named`): an operator its target table, the
statements' tables read with :mod:`.written`, and the tables a user names (``tables=``). What no
caller can name — a table written by a trigger or a stored function — is caught afterwards, on
MySQL/MariaDB: a rollback that leaves such changes raises
:class:`~airflow_crashsafe.errors.IncompleteRollbackError` (:mod:`airflow_crashsafe.fencing.transaction`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_crashsafe.errors import ConfigurationError, UnfenceableTableError
from airflow_crashsafe.sql.quoting import Quoter, TableName, parse_table_name
from airflow_crashsafe.sql.written import view_tables, written_tables
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.dialects import dialect_named
from airflow_crashsafe.store.fences import FENCE_ROLE, FENCE_TABLE
from airflow_crashsafe.store.mysql_engines import engine_refusal, is_fenceable_engine

__all__ = ["Named", "check_body_tables", "check_statement_tables", "check_tables", "table_named"]

_MAX_VIEW_DEPTH = 8  # views over views: deeper than this is refused rather than followed
# One branch per table: equalities on both columns let the server open that table's definition
# alone (an IN list over names makes it read every table of the schema).
_MYSQL_TABLE = (
    "SELECT {n} AS n, TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, ENGINE FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = COALESCE(%(s{n})s, DATABASE()) AND TABLE_NAME = %(t{n})s"
)
_MYSQL_VIEW = (
    "SELECT VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %(s)s AND TABLE_NAME = %(t)s"
)
# The table and, when it is partitioned, every partition (pg_partition_tree: PostgreSQL 12+; it
# lists nothing for a table that is not partitioned).
_PG_TABLE = (
    "SELECT {n} AS n, c.oid::regclass::text, c.relkind::text, c.relpersistence::text FROM "
    "(SELECT to_regclass(%(t{n})s) AS oid UNION SELECT relid FROM pg_partition_tree(to_regclass(%(t{n})s))) "
    "AS r JOIN pg_class AS c ON c.oid = r.oid"
)


@dataclass(frozen=True)
class Named:
    """A table a fenced write changes: its name, what it is to the write (for messages), and
    whether it must exist (a name that may not be a table, e.g. a fence target, may be absent)."""

    table: TableName
    role: str
    required: bool = True


def table_named(name: str) -> TableName | None:
    """``name`` as a table name, or None when it cannot be one (a fence target may be any text)."""
    try:
        return parse_table_name(name)
    except ConfigurationError:
        return None


def check_body_tables(db: Db, target: str, tables: Sequence[str] | None) -> list[TableName]:
    """``fenced_transaction``'s tables: ``target`` when it names one, and each of ``tables``.

    MySQL/MariaDB: always (with the fence table); PostgreSQL: when ``tables`` are given (the
    target alone is not looked up there: a round trip more on every write). The tables found.
    """
    if not (db.dialect.is_mysql or (db.dialect.is_postgres and tables)):
        return []
    named = [Named(parse_table_name(t), "named in tables=") for t in tables or ()]
    table = table_named(target)
    if table is not None:
        named.insert(0, Named(table, "the fence's target", required=False))
    return check_tables(db, named)


def check_statement_tables(
    db: Db, stmts: Sequence[str], target: str, tables: Sequence[str] | None, task_id: str
) -> list[TableName]:
    """``FencedSQLOperator``'s tables: ``target`` when it names one, those its statements change
    (read with sqlglot), and each of ``tables``. On MySQL/MariaDB a statement whose tables cannot
    be read (``CALL``, ``LOAD DATA``, ...) is refused unless ``tables`` names them. The tables found.
    """
    if not (db.dialect.is_mysql or db.dialect.is_postgres):
        return []
    written = written_tables(dialect_named(db.dialect.name).sqlglot, stmts)
    if db.dialect.is_mysql and written.unknown and tables is None:
        first = stmts[written.unknown[0] - 1].strip().splitlines()[0][:60]
        raise ConfigurationError(
            f"Statement {written.unknown[0]} of {task_id!r} ({first}...) changes tables crashsafe "
            "cannot read from its text, and on MySQL/MariaDB every table a fenced write changes "
            "must be InnoDB, checked before the write. Name the tables it changes in tables=[...] "
            "(each is checked), or write its INSERT/UPDATE/DELETE out."
        )
    named = [Named(parse_table_name(t), f"named in tables= of {task_id!r}") for t in tables or ()]
    named += [Named(t, f"changed by statement {n} of {task_id!r}", required=False) for n, t in written.tables]
    table = table_named(target)
    if table is not None:
        named.insert(0, Named(table, f"the fence target of {task_id!r}", required=False))
    return check_tables(db, named)


def check_tables(db: Db, named: Sequence[Named]) -> list[TableName]:
    """Refuse any table of ``named`` the fence cannot protect; the tables of ``named`` found.

    A table accepted (or found absent) on a connection is not looked up again on it: a task's
    connection serves its writes, and the catalog read costs a round trip that reads table
    definitions. So the check holds from the connection's first write to each table.

    :raises UnfenceableTableError: a table that cannot roll back with the fence (the message
        names it, says why and gives the statement that fixes it).
    :raises ConfigurationError: a required table does not exist.
    """
    entries = list(named)
    if db.dialect.is_mysql:
        entries.append(Named(TableName((FENCE_TABLE,)), FENCE_ROLE, required=False))
    elif not (db.dialect.is_postgres and entries):
        return []
    known = db.checked_tables
    todo = [e for e in entries if e.table.parts not in known or (e.required and not known[e.table.parts])]
    if todo:
        found = _mysql(db, todo, depth=0) if db.dialect.is_mysql else _postgres(db, todo)
        for i, entry in enumerate(todo):
            known[entry.table.parts] = i in found
    return [e.table for e in entries if known[e.table.parts] and e.role != FENCE_ROLE]


def _missing(db: Db, entry: Named) -> ConfigurationError:
    return ConfigurationError(
        f"Table {entry.table.display()} ({entry.role}) does not exist in {db.describe()}; name the "
        "tables the write changes as they are spelt there (schema.table for another schema)."
    )


def _mysql(db: Db, named: Sequence[Named], depth: int) -> dict[int, TableName]:
    """Check ``named`` in one round trip (and any view's tables in one more); those found, by index."""
    sql = " UNION ALL ".join(_MYSQL_TABLE.format(n=i) for i in range(len(named)))
    params: dict[str, object] = {}
    for i, entry in enumerate(named):
        params[f"s{i}"], params[f"t{i}"] = entry.table.schema, entry.table.table
    found = {int(row[0]): row[1:] for row in db.execute(sql, params).fetchall()}
    accepted: dict[int, TableName] = {}
    for i, entry in enumerate(named):
        if i not in found:
            if entry.required:
                raise _missing(db, entry)
            continue
        schema, table = str(found[i][0]), str(found[i][1])
        kind, engine = found[i][2], found[i][3]
        fence = entry.role == FENCE_ROLE
        if kind == "VIEW":
            _mysql_view(db, schema, table, entry.role, depth)
        elif kind in ("BASE TABLE", "SYSTEM VERSIONED"):
            if not is_fenceable_engine(engine):
                raise engine_refusal(db, schema, table, entry.role, engine, fence=fence)
        elif kind != "TEMPORARY":  # the session's own temporary table: nothing another attempt sees
            raise UnfenceableTableError(
                f"Table {schema}.{table} ({entry.role}) is a {kind}, whose changes do not roll back "
                "with a transaction; a fenced write can change InnoDB tables only. Nothing was written."
            )
        accepted[i] = TableName((schema, table))
    return accepted


def _mysql_view(db: Db, schema: str, view: str, role: str, depth: int) -> None:
    """A write through a view changes one of its tables: check every table it names."""
    row = db.execute(_MYSQL_VIEW, {"s": schema, "t": view}).fetchone()
    tables = view_tables("mysql", str(row[0])) if row is not None and row[0] else None
    if not tables or depth >= _MAX_VIEW_DEPTH:
        why = "nests views too deeply" if tables else "has a definition crashsafe cannot read"
        raise UnfenceableTableError(
            f"View {schema}.{view} ({role}) {why} (reading it takes the SHOW VIEW privilege), so "
            "crashsafe cannot tell whether the tables under it are InnoDB; write to the table itself. "
            "Nothing was written."
        )
    under = [Named(t, f"under view {schema}.{view}, {role}", required=False) for t in tables]
    _mysql(db, under, depth + 1)


def _postgres(db: Db, named: Sequence[Named]) -> dict[int, TableName]:
    """Check ``named`` in one round trip; those found, by index."""
    quoter = Quoter.for_db(db)
    sql = " UNION ALL ".join(_PG_TABLE.format(n=i) for i in range(len(named)))
    params = {f"t{i}": quoter.table(entry.table) for i, entry in enumerate(named)}
    rows = db.execute(sql, params).fetchall()
    accepted: dict[int, TableName] = {}
    for i, entry in enumerate(named):
        mine = [(str(name), str(kind), str(persistence)) for n, name, kind, persistence in rows if n == i]
        if not mine:
            if entry.required:
                raise _missing(db, entry)
            continue
        whole = entry.table.display()
        for name, kind, persistence in mine:
            part = "" if name in (whole, quoter.table(entry.table)) else f", whose partition {name}"
            if kind == "f":
                raise UnfenceableTableError(
                    f"Table {whole} ({entry.role}){part} is a foreign table: a write to it goes to "
                    "another server, outside the fence's transaction, so a stale attempt's write could "
                    "stand. Write to a local table (and move the rows on in a step of its own). "
                    "Nothing was written."
                )
            if persistence == "u":
                raise UnfenceableTableError(
                    f"Table {whole} ({entry.role}){part} is UNLOGGED: a PostgreSQL crash empties it "
                    "while the fence row still records the write as committed, so a retry would skip "
                    f"work that is gone. Make it logged (ALTER TABLE {name} SET LOGGED) or write to a "
                    "logged table. Nothing was written."
                )
        accepted[i] = entry.table
    return accepted
