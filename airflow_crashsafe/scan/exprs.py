"""Reading Python expressions without running them: dotted names, strings (f-strings too), randomness.

Used by :mod:`.calls` and :mod:`.python_code`; a :class:`~airflow_crashsafe.scan.python_code.Scope`
gives the names assigned in the function and its module's globals.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.scan.call_names import PROTECTIONS, RANDOM, RUN_SCOPED
from airflow_crashsafe.scan.names import target_key

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["EACH", "dotted", "is_protection", "is_random", "kw", "refs_run", "snippet", "string_value"]

#: The subscript a loop variable is bound to: "each item of" the iterated value.
EACH = "\x00each"


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


def refs_run(node: ast.AST, scope: Scope, depth: int = 0) -> bool:
    """True when the expression uses a value of the run (``ds``, ``run_id``, a parameter holding one)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            if sub.id in scope.run_scoped or sub.id in RUN_SCOPED:
                return True
            if depth < 4:
                with scope.lookup(sub.id) as found:
                    if found is not None and refs_run(found[0], found[1], depth + 1):
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
        if isinstance(sub, ast.Name):
            with scope.lookup(sub.id) as found:
                if found is not None and is_random(found[0], found[1], depth + 1):
                    return True
    return False


def _placeholder(node: ast.expr) -> str:
    """A value the scan cannot know, as an identifier naming it (the same expression, the same name)."""
    return re.sub(r"\W+", "_", ast.unparse(node)).strip("_")[:40] or "x"


def _formatted(value: ast.FormattedValue, scope: Scope, depth: int) -> str:
    inner = string_value(value.value, scope, depth + 1)
    if inner is not None and "'" not in inner:
        return inner.split(";\n")[0]  # one item of a list of names
    if refs_run(value.value, scope):
        return next(iter(scope.walk.markers), "x")
    return _placeholder(value.value)


def string_value(node: ast.expr | None, scope: Scope, depth: int = 0) -> str | None:
    """The text of a string expression (run-scoped f-string values become the sample date)."""
    if node is None or depth > 8:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else _formatted(v, scope, depth)
            for v in node.values
            if isinstance(v, ast.Constant | ast.FormattedValue)
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_value(node.left, scope, depth + 1), string_value(node.right, scope, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "... %s" % x
        return string_value(node.left, scope, depth + 1)
    if isinstance(node, ast.Call):
        return _call_text(node, scope, depth)
    if isinstance(node, ast.IfExp):  # either branch may run: the first one that reads
        text = string_value(node.body, scope, depth + 1)
        return text if text is not None else string_value(node.orelse, scope, depth + 1)
    if isinstance(node, ast.List | ast.Tuple):
        items = [
            string_value(e.value if isinstance(e, ast.Starred) else e, scope, depth + 1) for e in node.elts
        ]
        return None if any(i is None for i in items) else ";\n".join(i for i in items if i)
    if isinstance(node, ast.Subscript):
        return _item_text(node, scope, depth)
    key = target_key(node)
    if key is not None:
        with scope.lookup(key) as found:
            if found is not None:
                return string_value(found[0], found[1], depth + 1)
        return scope.text_of(key)
    return None


_STR_METHODS = {"strip", "rstrip", "lstrip", "lower", "upper"}
_SAME_TEXT = _STR_METHODS | {"dedent"}
_FIELD = re.compile(r"\{([^{}]*)\}")


def _format(base: str, node: ast.Call, scope: Scope, depth: int) -> str:
    """``"...{}...{name}".format(a, name=b)``: each field by its argument's text, else the argument's name."""
    position = iter(range(len(node.args)))

    def field(match: re.Match[str]) -> str:
        name = match.group(1).split("!")[0].split(":")[0]
        if not name:
            index = next(position, None)
            arg = node.args[index] if index is not None else None
        elif name.isdigit():
            arg = node.args[int(name)] if int(name) < len(node.args) else None
        else:
            arg = next((k.value for k in node.keywords if k.arg == name), None)
        if arg is None:
            return name or "x"
        text = string_value(arg, scope, depth + 1)
        return text if text is not None and "'" not in text else _placeholder(arg)

    return _FIELD.sub(field, base)


#: Calls whose text is their first argument's (SQLAlchemy's ``text``, psycopg2's ``sql.SQL``, ...).
_WRAPPERS = {"text", "dedent", "str", "SQL", "Composed", "Literal", "Identifier"}


def _call_text(node: ast.Call, scope: Scope, depth: int) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "format":
        base = string_value(func.value, scope, depth + 1)
        return None if base is None else _format(base, node, scope, depth)
    if isinstance(func, ast.Attribute) and func.attr in _SAME_TEXT:
        base = string_value(func.value, scope, depth + 1)
        return None if base is None else getattr(base, func.attr)() if func.attr in _STR_METHODS else base
    if isinstance(func, ast.Attribute) and func.attr == "join" and node.args:
        sep = string_value(func.value, scope, depth + 1)
        items = node.args[0]
        if sep is not None and isinstance(items, ast.List | ast.Tuple):
            parts = [string_value(e, scope, depth + 1) for e in items.elts]
            return None if any(p is None for p in parts) else sep.join(p for p in parts if p is not None)
        text = string_value(items, scope, depth + 1)
        return text.replace(";\n", sep) if text is not None and sep is not None else None
    if dotted(func).rsplit(".", 1)[-1] in _WRAPPERS and node.args:
        return string_value(node.args[0], scope, depth + 1)
    return None


def _item_text(node: ast.Subscript, scope: Scope, depth: int) -> str | None:
    """``SQL["load"]`` of a dict, or one item of a list the code loops over (all of them: each runs)."""
    key = node.slice.value if isinstance(node.slice, ast.Constant) else None
    if key == EACH:
        return string_value(node.value, scope, depth + 1)
    container: Any = node.value
    base = target_key(container)
    if base is not None:
        with scope.lookup(base) as found:
            if found is not None:
                container, scope = found
            else:
                value = scope.value_of(base)
                if isinstance(value, dict | list | tuple):
                    try:
                        item = value[key]  # type: ignore[index]
                    except (KeyError, IndexError, TypeError):
                        return None
                    return item if isinstance(item, str) else None
                return None
    if isinstance(container, ast.Dict):
        for k, v in zip(container.keys, container.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == key:
                return string_value(v, scope, depth + 1)
    if (
        isinstance(container, ast.List | ast.Tuple)
        and isinstance(key, int)
        and -len(container.elts) <= key < len(container.elts)
    ):
        return string_value(container.elts[key], scope, depth + 1)
    return None
