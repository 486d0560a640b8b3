"""Python that inserts only what the target does not hold yet: an append that a re-run does not repeat.

Two shapes teams write, each checked against a read *of the same target* (its table or model name
appears in what was read), so an unrelated check (``if not rows: send_alert()``) does not count:

- the insert sits under a test of absence: ``if not existing:`` / ``if row is None:`` /
  ``if key not in seen:`` / the ``else`` of ``if existing:``, where ``existing`` was read from the
  target (``session.query(Author).filter_by(...).first()``, ``cur.fetchone()`` after ``SELECT ...
  FROM authors``);
- the rows inserted are filtered against what the target holds: ``[r for r in rows if r["id"] not
  in existing_ids]`` or ``df[~df.id.isin(existing.id)]`` with ``existing_ids`` read from the target.

A re-run after success reads everything the first run inserted and inserts nothing more.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.exprs import dotted
from airflow_crashsafe.scan.sqlalchemy_core import statement_target

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["append_target", "inserts_only_missing"]

_READS = re.compile(
    r"\b(query|filter_by|filter|first|one_or_none|scalar|scalars|get|get_records|get_first|fetchone|fetchall|"
    r"fetchmany|exists|count|read_sql|read_sql_query|get_pandas_df|get_df|select|execute)\s*\(",
)


def append_target(node: ast.Call, scope: Scope) -> str | None:
    """The table or model an appending call writes (None when it cannot be told)."""
    attr = node.func.attr if isinstance(node.func, ast.Attribute) else dotted(node.func)
    if attr in {"add", "add_all", "merge"} and node.args:
        obj = node.args[0]
        if isinstance(obj, ast.Name):
            with scope.lookup(obj.id) as found:
                obj = found[0] if found is not None else obj
        if isinstance(obj, ast.Call):
            return dotted(obj.func).rsplit(".", 1)[-1]
        return None
    if (
        attr in {"insert_rows", "bulk_insert_mappings", "insert_rows_json", "bulk_load", "to_sql", "to_gbq"}
        and node.args
    ):
        return scope.string_of(node.args[0]) or dotted(node.args[0]) or None
    if attr in {"execute", "executemany"} and node.args:
        from_core = _core_target(node.args[0], scope)
        if from_core:
            return from_core
        return scope.walk.sql.written[-1] if scope.walk.sql.written else None
    if attr in {"execute_batch", "execute_values"}:
        return scope.walk.sql.written[-1] if scope.walk.sql.written else None
    return None


def _core_target(expr: ast.expr, scope: Scope) -> str | None:
    node = expr
    for _ in range(12):
        if isinstance(node, ast.Name):
            with scope.lookup(node.id) as found:
                if found is None:
                    return None
                node = found[0]
            continue
        if isinstance(node, ast.Call):
            if dotted(node.func).rsplit(".", 1)[-1].removesuffix("()") == "insert":
                return statement_target(node)
            if isinstance(node.func, ast.Attribute):
                node = node.func.value
                continue
        return None
    return None


def _mentions(name: str, text: str) -> bool:
    """The table or model's own name appears in ``text`` as a word (``events``, not ``events_log``)."""
    short = name.rsplit(".", 1)[-1].strip('"`').lower()
    return bool(short) and re.search(rf"(?<![\w$]){re.escape(short)}(?![\w$])", text.lower()) is not None


def _read_of(expr: ast.expr, target: str, scope: Scope, depth: int = 0) -> bool:
    """True when ``expr`` (or the names it uses) reads from ``target``."""
    text = ast.unparse(expr)
    if _READS.search(text) and _mentions(target, text + " " + (scope.string_of(expr) or "")):
        return True
    if depth >= 3:
        return False
    for sub in ast.walk(expr):
        if isinstance(sub, ast.Name):
            with scope.lookup(sub.id) as found:
                if found is not None and _read_of(found[0], target, found[1], depth + 1):
                    return True
        if (
            isinstance(sub, ast.Constant)
            and isinstance(sub.value, str)
            and "select" in sub.value.lower()
            and _mentions(target, sub.value)
        ):
            return True
    return depth > 0 and _sql_read_before(expr, target, scope)


def _sql_read_before(expr: ast.expr, target: str, scope: Scope) -> bool:
    """``cur.fetchall()`` after ``cur.execute("SELECT ... FROM <target>")``: the cursor's earlier read."""
    text = ast.unparse(expr)
    return bool(re.search(r"\bfetch(all|one|many)\s*\(", text)) and target.lower().rsplit(".", 1)[-1] in {
        t.lower().rsplit(".", 1)[-1] for t in scope.walk.sql.read
    }


def _absence(test: ast.expr) -> list[ast.expr]:
    """The expressions a test finds absent: ``not x`` -> x; ``x is None`` -> x; ``k not in x`` -> x."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return [test.operand]
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if (
            isinstance(op, ast.Is | ast.Eq)
            and isinstance(right, ast.Constant)
            and right.value in (None, 0, False)
        ):
            return [test.left]
        if isinstance(op, ast.NotIn):
            return [right]
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [e for v in test.values for e in _absence(v)]
    return []


def _filtered(expr: ast.expr, target: str, scope: Scope, depth: int = 0) -> bool:
    """The rows passed are filtered against a read of the target (``not in`` / ``~isin``)."""
    for sub in ast.walk(expr):
        if (
            isinstance(sub, ast.Compare)
            and any(isinstance(o, ast.NotIn) for o in sub.ops)
            and any(_read_of(c, target, scope, 1) for c in sub.comparators)
        ):
            return True
        if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.Invert | ast.Not):
            inner = sub.operand
            if (
                isinstance(inner, ast.Call)
                and dotted(inner.func).endswith("isin")
                and any(_read_of(a, target, scope, 1) for a in inner.args)
            ):
                return True
        if depth < 3 and isinstance(sub, ast.Name):
            with scope.lookup(sub.id) as found:
                if found is not None and _filtered(found[0], target, found[1], depth + 1):
                    return True
    return False


def inserts_only_missing(node: ast.Call, scope: Scope, guards: list[ast.expr]) -> bool:
    """True when the appending call at ``node`` only writes rows the target did not hold."""
    target = append_target(node, scope)
    if not target:
        return False
    for test in guards:
        if any(_read_of(e, target, scope) for e in _absence(test)):
            return True
    rows = [*node.args[1:], *(k.value for k in node.keywords if k.arg in {"rows", "mappings", "params"})]
    if isinstance(node.func, ast.Attribute) and node.func.attr in {"add_all"}:
        rows = node.args[:1]
    if isinstance(node.func, ast.Attribute) and node.func.attr in {"to_sql", "to_gbq"}:
        rows = [node.func.value]  # the frame itself
    return any(_filtered(r, target, scope) for r in rows)
