"""Reading Python expressions without running them: dotted names, strings (f-strings too), randomness.

Used by :mod:`.calls` and :mod:`.python_code`; a :class:`~airflow_crashsafe.scan.python_code.Scope`
gives the names assigned in the function and its module's globals.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.call_names import PROTECTIONS, RANDOM, RUN_SCOPED

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["dotted", "is_protection", "is_random", "kw", "refs_run", "snippet", "string_value"]


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name/attribute chain (calls in the chain keep their name: ``a.b().c``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        base = dotted(node.func)
        return f"{base}()" if base else ""
    if isinstance(node, ast.Subscript):
        return dotted(node.value)
    return ""


def snippet(node: ast.AST, limit: int = 140) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_protection(name: str) -> bool:
    return name.split(".")[-1].removesuffix("()") in PROTECTIONS


def kw(node: ast.Call, *names: str) -> ast.expr | None:
    for k in node.keywords:
        if k.arg in names:
            return k.value
    return None


def refs_run(node: ast.AST, scope: Scope) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id in scope.run_scoped or sub.id in RUN_SCOPED):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in RUN_SCOPED:
            return True
        if isinstance(sub, ast.Call) and dotted(sub.func).endswith("idempotency_key"):
            return True
    return False


def is_random(node: ast.AST, scope: Scope, depth: int = 0) -> bool:
    """True when the expression (or a local name it uses) draws a random or time-based value."""
    if RANDOM.search(ast.unparse(node)):
        return True
    if depth > 3:
        return False
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Name)
            and sub.id in scope.assigned
            and is_random(scope.assigned[sub.id], scope, depth + 1)
        ):
            return True
    return False


def string_value(node: ast.expr | None, scope: Scope, depth: int = 0) -> str | None:
    """The text of a string expression (run-scoped f-string values become the sample date)."""
    if node is None or depth > 6:
        return None
    sample = next(iter(scope.walk.markers), "x")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                inner = string_value(value.value, scope, depth + 1)
                parts.append(
                    inner
                    if inner is not None and "'" not in inner
                    else (sample if refs_run(value.value, scope) else "x")
                )
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_value(node.left, scope, depth + 1), string_value(node.right, scope, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "... %s" % x
        return string_value(node.left, scope, depth + 1)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"format", "strip", "dedent"}
    ):
        base = string_value(node.func.value, scope, depth + 1)
        return (
            base.replace("{", "").replace("}", "")
            if base is not None and node.func.attr == "format"
            else base
        )
    if (
        isinstance(node, ast.Call)
        and dotted(node.func) in {"text", "sqlalchemy.text", "textwrap.dedent", "dedent"}
        and node.args
    ):
        return string_value(node.args[0], scope, depth + 1)
    if isinstance(node, ast.List | ast.Tuple):
        items = [string_value(e, scope, depth + 1) for e in node.elts]
        return None if any(i is None for i in items) else ";\n".join(i for i in items if i is not None)
    if isinstance(node, ast.Name):
        if node.id in scope.assigned:
            return string_value(scope.assigned[node.id], scope, depth + 1)
        known = scope.globals.get(node.id)
        if isinstance(known, str):
            return known
        if isinstance(known, list | tuple) and all(isinstance(v, str) for v in known):
            return ";\n".join(known)
    return None
