"""Which tables a statement changes, read from its text with sqlglot, for the fence's table check.

A fenced write may only change tables that roll back with the fence's transaction
(:mod:`.fenceable`), so the tables a user's statement writes are read from it before it runs:

- ``INSERT`` / ``REPLACE`` (and ``INSERT ... SELECT``, ``... ON DUPLICATE KEY UPDATE``), ``MERGE``:
  its table;
- ``UPDATE``: every table it names before ``SET``, joins included (a multi-table UPDATE may set
  columns of any of them);
- ``DELETE``: the tables it deletes from (``DELETE a, b FROM ...`` names them, aliases resolved),
  else its table;
- statements that change no table: ``SELECT`` (MySQL's ``INTO @var`` too, not ``INTO OUTFILE``),
  ``SET``, and the temporary tables a fenced write may create and drop (they live and die with
  the session).

Anything else (``CALL``, ``LOAD DATA``, ``DO``, text sqlglot cannot parse) is *unknown*: which
tables it changes cannot be read from it, and the caller refuses it unless told the tables.
Tables only read (a source, a subquery) are not returned: reading any table is safe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_crashsafe.sql.quoting import TableName

if TYPE_CHECKING:
    from sqlglot import exp

__all__ = ["Written", "view_tables", "written_tables"]

# Placeholders of the pyformat drivers (MySQL, PostgreSQL): a value in any position.
_PLACEHOLDER = re.compile(r"%\(\w+\)s|%s")
_REPLACE = re.compile(r"^\s*REPLACE(\s+(LOW_PRIORITY|DELAYED))?\b", re.IGNORECASE)
_INTO_FILE = re.compile(r"\bINTO\s+(OUTFILE|DUMPFILE)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Written:
    """What a list of statements writes: ``(statement number from 1, table)`` pairs, and the
    numbers of the statements whose tables cannot be read from their text."""

    tables: tuple[tuple[int, TableName], ...]
    unknown: tuple[int, ...]


def written_tables(sqlglot_dialect: str, stmts: Sequence[str]) -> Written:
    """The tables ``stmts`` change, read with sqlglot in ``sqlglot_dialect`` (``mysql``, ``postgres``)."""
    tables: list[tuple[int, TableName]] = []
    unknown: list[int] = []
    for number, stmt in enumerate(stmts, start=1):
        found = _statement_tables(sqlglot_dialect, stmt)
        if found is None:
            unknown.append(number)
        else:
            tables.extend((number, t) for t in found)
    return Written(tuple(dict.fromkeys(tables)), tuple(unknown))


def view_tables(sqlglot_dialect: str, definition: str) -> list[TableName] | None:
    """Every table a view's definition names (a write through it goes to one of them); None when
    the definition cannot be parsed."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        trees = [t for t in sqlglot.parse(definition, read=sqlglot_dialect) if t is not None]
    except SqlglotError:
        return None
    if len(trees) != 1 or not isinstance(trees[0], exp.Query):
        return None
    ctes = {c.alias_or_name for c in trees[0].find_all(exp.CTE)}
    names = [_name(t) for t in trees[0].find_all(exp.Table) if t.name and t.name not in ctes]
    return list(dict.fromkeys(names))


def _statement_tables(sqlglot_dialect: str, stmt: str) -> list[TableName] | None:
    """The tables one statement changes; None when that cannot be read from its text."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    text = _PLACEHOLDER.sub("NULL", stmt)
    if sqlglot_dialect == "mysql":  # sqlglot reads REPLACE as a bare command; it writes as INSERT does
        text = _REPLACE.sub("INSERT", text, count=1)
    try:
        trees = [t for t in sqlglot.parse(text, read=sqlglot_dialect) if t is not None]
    except SqlglotError:
        return None
    if len(trees) != 1:
        return None
    tree = trees[0]
    if isinstance(tree, exp.Insert):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        return [_name(target)] if isinstance(target, exp.Table) else None
    if isinstance(tree, exp.Merge):
        return [_name(tree.this)] if isinstance(tree.this, exp.Table) else None
    if isinstance(tree, exp.Update):
        return _tables_in(tree.this) or None
    if isinstance(tree, exp.Delete):
        return _deleted_from(tree)
    if isinstance(tree, exp.Select):
        # MySQL's SELECT ... INTO @var sets a variable; INTO OUTFILE writes a file, and
        # PostgreSQL's SELECT ... INTO makes a table.
        into = tree.find(exp.Into) is not None or _INTO_FILE.search(text) is not None
        return None if into and (sqlglot_dialect != "mysql" or _INTO_FILE.search(text)) else []
    if isinstance(tree, exp.Set):
        return []
    if isinstance(tree, exp.Create | exp.Drop) and _temporary(tree):
        return []
    return None


def _deleted_from(tree: exp.Delete) -> list[TableName] | None:
    named = tree.args.get("tables") or []
    if not named:
        return _tables_in(tree.this) or None
    by_alias = {t.alias_or_name: t for t in _table_nodes(tree.this)}
    found = []
    for t in named:
        node = by_alias.get(t.name) if not t.args.get("db") else t
        if node is None:
            return _tables_in(tree.this) or None  # an alias not resolved: count every table named
        found.append(_name(node))
    return found


def _temporary(tree: exp.Create | exp.Drop) -> bool:
    from sqlglot import exp

    if isinstance(tree, exp.Drop):
        return bool(tree.args.get("temporary"))
    props = tree.args.get("properties")
    return props is not None and any(isinstance(p, exp.TemporaryProperty) for p in props.expressions)


def _table_nodes(node: exp.Expression | None) -> list[exp.Table]:
    from sqlglot import exp

    if node is None:
        return []
    tables = [node] if isinstance(node, exp.Table) else []
    tables += [t for t in node.find_all(exp.Table) if t is not node and not t.find_ancestor(exp.Subquery)]
    return list(dict.fromkeys(tables))


def _tables_in(node: exp.Expression | None) -> list[TableName]:
    return list(dict.fromkeys(_name(t) for t in _table_nodes(node)))


def _name(node: exp.Table) -> TableName:
    parts = tuple(p for p in (node.args.get("db") and node.db, node.name) if p)
    return TableName(parts)
