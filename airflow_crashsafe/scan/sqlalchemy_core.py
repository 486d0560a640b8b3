"""SQLAlchemy statements built in Python rather than written as SQL text, and ORM writes.

``session.execute(insert(Publication).values(...).on_conflict_do_update(...))`` runs SQL the scan
cannot read as text, but the chain of calls says what it does:

- ``insert(...)`` appends, unless the chain handles conflicts (``on_conflict_do_update`` /
  ``on_conflict_do_nothing`` / ``on_duplicate_key_update`` / ``prefix_with("IGNORE")``): then it
  is a keyed upsert, risky only when the update adds to a column of the target;
- ``update(...)`` sets values (risky when a value adds to its own column: ``Model.n + 1``);
- ``delete(...)`` removes nothing more when repeated; ``select(...)`` reads.

ORM sessions: ``add`` / ``add_all`` / ``bulk_insert_mappings`` insert new rows (an append);
``merge`` upserts by primary key; ``delete`` deletes.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.call_names import FIX_SQL
from airflow_crashsafe.scan.exprs import dotted, snippet
from airflow_crashsafe.scan.model import Finding, Reason

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["ORM_APPENDS", "core_statement", "orm_call", "statement_target"]

_ROOTS = {"insert", "update", "delete", "select"}
_CONFLICT = {"on_conflict_do_update", "on_conflict_do_nothing", "on_duplicate_key_update"}
ORM_APPENDS = {"add", "add_all", "bulk_save_objects", "bulk_insert_mappings"}


def _chain(node: ast.expr, scope: Scope, depth: int = 0) -> tuple[str, ast.Call, list[ast.Call]] | None:
    """(root verb, root call, the calls chained on it) of a statement expression, through names."""
    if depth > 12:
        return None
    if isinstance(node, ast.Name):
        with scope.lookup(node.id) as found:
            return _chain(found[0], found[1], depth + 1) if found is not None else None
    if not isinstance(node, ast.Call):
        return None
    name = dotted(node.func).rsplit(".", 1)[-1].removesuffix("()")
    resolved = scope.resolve(node.func) if name not in _ROOTS else None
    if resolved is not None and str(getattr(resolved, "__module__", "")).startswith("sqlalchemy"):
        name = str(getattr(resolved, "__name__", name))  # insert as pg_insert
    if name in _ROOTS:
        return name, node, []
    if isinstance(node.func, ast.Attribute):
        inner = _chain(node.func.value, scope, depth + 1)
        if inner is not None:
            return inner[0], inner[1], [*inner[2], node]
    return None


def statement_target(root: ast.Call) -> str:
    """The table or model a statement writes: ``insert(Publication)`` -> ``Publication``."""
    if root.args:
        return dotted(root.args[0]) or ast.unparse(root.args[0])
    if isinstance(root.func, ast.Attribute):  # users_table.insert()
        return dotted(root.func.value)
    return "?"


def _adds_to_itself(nodes: Sequence[ast.AST]) -> str | None:
    """``Model.n + 1`` / ``table.c.n + excluded.n`` in values or ``set_``: the column added to."""
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Add | ast.Sub):
                for side in (sub.left, sub.right):
                    text = dotted(side)
                    if "." in text and "excluded" not in text.lower():
                        return ast.unparse(sub)
    return None


def core_statement(expr: ast.expr | None, scope: Scope) -> Finding | None:
    """The finding of a SQLAlchemy Core statement passed to ``execute``; None if it is not one."""
    if expr is None:
        return None
    found = _chain(expr, scope)
    if found is None:
        return None
    verb, root, calls = found
    methods = {c.func.attr for c in calls if isinstance(c.func, ast.Attribute)}
    evidence = snippet(expr)
    if verb == "select":
        return Finding("safe", "read_only", [Reason("a SELECT built with SQLAlchemy", evidence)])
    if verb == "delete":
        return Finding("safe", "delete", [Reason("a DELETE: repeating it removes nothing more", evidence)])
    values = [n for c in calls for n in [*c.args, *(k.value for k in c.keywords)]]
    added = _adds_to_itself(values)
    if verb == "update":
        if added:
            return Finding(
                "risky", "increment", [Reason("an UPDATE adding to a column adds again", added)], FIX_SQL
            )
        return Finding("safe", "idempotent_update", [Reason("an UPDATE setting values", evidence)])
    ignore = any(
        c.func.attr == "prefix_with" and "IGNORE" in ast.unparse(c).upper()
        for c in calls
        if isinstance(c.func, ast.Attribute)
    )
    if methods & _CONFLICT or ignore:
        if added:
            return Finding(
                "risky", "increment", [Reason("an upsert that adds to a column counts twice", added)], FIX_SQL
            )
        return Finding(
            "safe", "natural_key_merge", [Reason("an upsert on a key: a re-run finds its rows", evidence)]
        )
    return Finding(
        "risky",
        "append",
        [
            Reason(
                f"an INSERT into {statement_target(root)} without conflict handling appends again", evidence
            )
        ],
        FIX_SQL,
    )


def orm_call(node: ast.Call, attr: str) -> Finding | None:
    """``session.add(obj)`` and friends: what an ORM write does on a re-run."""
    if attr in ORM_APPENDS:
        return Finding(
            "risky",
            "append",
            [Reason(f"session.{attr}() inserts new rows: a re-run inserts them again", snippet(node))],
            FIX_SQL,
        )
    if attr == "merge":
        return Finding(
            "safe", "natural_key_merge", [Reason("session.merge() upserts by primary key", snippet(node))]
        )
    if attr in {"bulk_update_mappings"}:
        return Finding("safe", "idempotent_update", [Reason("an update by primary key", snippet(node))])
    return None
