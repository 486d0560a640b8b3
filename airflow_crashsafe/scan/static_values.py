"""The values of Python expressions read from a syntax tree, without running any of the code.

Static analysis (docs/scan.md, "Files that do not import") needs the arguments a DAG file passes
its operators: literals, f-strings, names bound in the module or the enclosing loop, ``+`` of
strings and lists, ``{**common, "k": v}``, ``dict(...)``, ``.format`` / ``.join`` / ``.strip``
on known strings, ``range``, ``.items()``, and the ``os.path`` / ``Path`` arithmetic DAG files
use for their template folders. An expression that cannot be known becomes an
:class:`Unresolved` holding its text, so a reader can always tell "not known" from a value.
"""

from __future__ import annotations

import ast
import os
import textwrap
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any, Protocol

__all__ = [
    "RETURNS_ATTR",
    "Env",
    "LocalEnv",
    "Unresolved",
    "evaluate",
    "has_unresolved",
    "id_text",
]

#: An attribute a static function carries when its value can be computed from its arguments:
#: ``f(args, kwargs)`` gives what the function returns (see :mod:`.static_module`).
RETURNS_ATTR = "__crashsafe_returns__"
_MAX_DEPTH = 40
_MAX_ITEMS = 5000


class Unresolved:
    """A value the syntax tree does not give (a call's result, a Variable, a name bound at run time)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"<not known statically: {self.text}>"


class Env(Protocol):
    """Where names get their values: a loop's variables, a function's arguments, the module."""

    def lookup(self, name: str) -> Any: ...


class LocalEnv:
    """Names bound by a loop, a comprehension or a call, in front of an outer environment."""

    def __init__(self, names: Mapping[str, Any], outer: Env) -> None:
        self.names = dict(names)
        self.outer = outer

    def lookup(self, name: str) -> Any:
        head = name.split(".", 1)[0]
        if head in self.names:
            value = self.names[head]
            for attr in name.split(".")[1:]:
                value = _attribute(value, attr, name)
            return value
        return self.outer.lookup(name)


def has_unresolved(value: Any, depth: int = 0) -> bool:
    """True when ``value`` is, or holds somewhere inside it, an :class:`Unresolved`."""
    if isinstance(value, Unresolved):
        return True
    if depth > 8:
        return False
    if isinstance(value, Mapping):
        return any(has_unresolved(k, depth + 1) or has_unresolved(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return any(has_unresolved(v, depth + 1) for v in value)
    return False


def _text(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 120 else text[:119] + "…"


def id_text(node: ast.expr, env: Env) -> str:
    """A task or DAG id as far as it is known: unknown parts of an f-string stay as ``{expr}``."""
    value = evaluate(node, env)
    if isinstance(value, str):
        return value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                inner = evaluate(part.value, env)
                parts.append(str(inner) if _plain(inner) else "{" + _text(part.value) + "}")
        return "".join(parts)
    return "{" + _text(node) + "}"


def _plain(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and not isinstance(value, Unresolved)


def evaluate(node: ast.expr | None, env: Env, depth: int = 0) -> Any:
    """The value of ``node``, or an :class:`Unresolved` with its text."""
    if node is None:
        return None
    if depth > _MAX_DEPTH:
        return Unresolved(_text(node))
    try:
        return _evaluate(node, env, depth + 1)
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError, RecursionError):
        return Unresolved(_text(node))


def _evaluate(node: ast.expr, env: Env, depth: int) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.lookup(node.id)
    if isinstance(node, ast.JoinedStr):
        return _fstring(node, env, depth)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = _sequence(node.elts, env, depth)
        if isinstance(items, Unresolved):
            return items
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict):
        return _dict(node, env, depth)
    if isinstance(node, ast.Attribute):
        dotted = _dotted(node)
        if dotted:
            found = env.lookup(dotted)
            if not isinstance(found, Unresolved):
                return found
        base = evaluate(node.value, env, depth)
        if isinstance(base, Unresolved):
            return Unresolved(_text(node))
        return _attribute(base, node.attr, _text(node))
    if isinstance(node, ast.Subscript):
        base = evaluate(node.value, env, depth)
        key = evaluate(node.slice, env, depth)
        if isinstance(base, Unresolved) or isinstance(key, Unresolved):
            return Unresolved(_text(node))
        if isinstance(node.slice, ast.Slice):
            return Unresolved(_text(node))
        return base[key]
    if isinstance(node, ast.Slice):
        return Unresolved(_text(node))
    if isinstance(node, ast.BinOp):
        return _binop(node, env, depth)
    if isinstance(node, ast.IfExp):
        test = evaluate(node.test, env, depth)
        if isinstance(test, Unresolved):
            return Unresolved(_text(node))
        return evaluate(node.body if test else node.orelse, env, depth)
    if isinstance(node, ast.Call):
        return _call(node, env, depth)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _compare(node, env, depth)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        value = evaluate(node.operand, env, depth)
        return Unresolved(_text(node)) if has_unresolved(value) else not value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = evaluate(node.operand, env, depth)
        return -value if isinstance(value, int | float) else Unresolved(_text(node))
    return Unresolved(_text(node))


_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}


def _compare(node: ast.Compare, env: Env, depth: int) -> Any:
    op = _COMPARE.get(type(node.ops[0]))
    left = evaluate(node.left, env, depth)
    right = evaluate(node.comparators[0], env, depth)
    if op is None or has_unresolved(left) or has_unresolved(right):
        return Unresolved(_text(node))
    return op(left, right)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _fstring(node: ast.JoinedStr, env: Env, depth: int) -> Any:
    parts: list[str] = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
            continue
        if not isinstance(part, ast.FormattedValue):
            return Unresolved(_text(node))
        value = evaluate(part.value, env, depth)
        if isinstance(value, Unresolved) or has_unresolved(value):
            return Unresolved(_text(node))
        spec = evaluate(part.format_spec, env, depth) if part.format_spec is not None else ""
        if isinstance(spec, Unresolved):
            return Unresolved(_text(node))
        if part.conversion == ord("r"):
            value = repr(value)
        elif part.conversion == ord("s"):
            value = str(value)
        parts.append(format(value, spec))
    return "".join(parts)


def _sequence(elts: list[ast.expr], env: Env, depth: int) -> list[Any] | Unresolved:
    out: list[Any] = []
    for elt in elts:
        if isinstance(elt, ast.Starred):
            inner = evaluate(elt.value, env, depth)
            if not isinstance(inner, list | tuple | range):
                return Unresolved(_text(elt))
            out.extend(inner)
        else:
            out.append(evaluate(elt, env, depth))
    return out


def _dict(node: ast.Dict, env: Env, depth: int) -> Any:
    out: dict[Any, Any] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:  # {**other}
            inner = evaluate(value, env, depth)
            if not isinstance(inner, Mapping):
                return Unresolved(_text(node))
            out.update(inner)
            continue
        k = evaluate(key, env, depth)
        if isinstance(k, Unresolved):
            return Unresolved(_text(node))
        out[k] = evaluate(value, env, depth)
    return out


def _binop(node: ast.BinOp, env: Env, depth: int) -> Any:
    left = evaluate(node.left, env, depth)
    right = evaluate(node.right, env, depth)
    if isinstance(left, Unresolved) or isinstance(right, Unresolved):
        return Unresolved(_text(node))
    if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, str | list | tuple):
        return left + right
    if isinstance(node.op, ast.Add | ast.Sub | ast.Mult) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)
    ):
        ops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: lambda a, b: a + b,
            ast.Sub: lambda a, b: a - b,
            ast.Mult: lambda a, b: a * b,
        }
        return ops[type(node.op)](left, right)
    if isinstance(node.op, ast.Mod) and isinstance(left, str) and not has_unresolved(right):
        return left % right
    if isinstance(node.op, ast.BitOr) and isinstance(left, dict) and isinstance(right, dict):
        return {**left, **right}
    if isinstance(node.op, ast.Div) and isinstance(left, PurePath) and isinstance(right, str | PurePath):
        return left / right
    return Unresolved(_text(node))


def _attribute(value: Any, attr: str, text: str) -> Any:
    if isinstance(value, PurePath) and attr in {"parent", "name", "stem", "suffix"}:
        return getattr(value, attr)
    if isinstance(value, Mapping) and not isinstance(value, Unresolved) and attr in value:
        return value[attr]  # a namespace-like constant (a repo module's value)
    return Unresolved(text)


_PATH_FUNCS: dict[str, Callable[..., Any]] = {
    "os.path.join": os.path.join,
    "os.path.dirname": os.path.dirname,
    "os.path.basename": os.path.basename,
    "os.path.abspath": os.path.abspath,
    "os.path.realpath": os.path.realpath,
    "os.path.normpath": os.path.normpath,
    "os.path.expanduser": os.path.expanduser,
    "path.join": os.path.join,
    "path.dirname": os.path.dirname,
    "path.abspath": os.path.abspath,
    "join": os.path.join,
    "dirname": os.path.dirname,
    "abspath": os.path.abspath,
}
_STR_METHODS = {"strip", "lstrip", "rstrip", "lower", "upper", "replace", "split", "format", "join", "title"}


def _call(node: ast.Call, env: Env, depth: int) -> Any:
    name = _dotted(node.func)
    args = _sequence(node.args, env, depth)
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        value = evaluate(kw.value, env, depth)
        if kw.arg is None:
            if not isinstance(value, Mapping):
                return Unresolved(_text(node))
            kwargs.update(value)
        else:
            kwargs[kw.arg] = value
    if isinstance(args, Unresolved):
        return Unresolved(_text(node))
    returns = getattr(env.lookup(name), RETURNS_ATTR, None) if name else None
    if returns is not None:  # the repository's own function whose body is one return
        return returns(args, kwargs)
    if name.endswith("Param") and (args or "default" in kwargs):  # a DAG param: its default
        return kwargs.get("default", args[0] if args else None)
    if name in {"Variable.get", "Variable.get_variable_from_secrets"} or has_unresolved(args):
        return Unresolved(_text(node))
    if has_unresolved(kwargs):
        return Unresolved(_text(node))
    if name in _PATH_FUNCS and all(isinstance(a, str | PurePath) for a in args) and not kwargs:
        return _PATH_FUNCS[name](*args)
    if name in {"Path", "pathlib.Path", "PurePath", "pathlib.PurePath"} and all(
        isinstance(a, str | PurePath) for a in args
    ):
        return PurePath(*args)
    if name in {"textwrap.dedent", "dedent"} and len(args) == 1 and isinstance(args[0], str):
        return textwrap.dedent(args[0])
    simple = _builtin(name, args, kwargs)
    if simple is not None:
        return simple
    if isinstance(node.func, ast.Attribute):
        return _method(node, env, depth, args, kwargs)
    return Unresolved(_text(node))


def _builtin(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if name == "dict" and len(args) <= 1:
        base = dict(args[0]) if args else {}
        base.update(kwargs)
        return base
    if kwargs:
        return None
    if name == "range" and 1 <= len(args) <= 3 and all(isinstance(a, int) for a in args):
        r = range(*args)
        return list(r) if len(r) <= _MAX_ITEMS else None
    if len(args) != 1:
        return None
    (arg,) = args
    if name == "str" and isinstance(arg, str | int | float | PurePath):
        return str(arg)
    if name in {"list", "tuple", "sorted", "set"} and isinstance(arg, list | tuple | dict | str):
        items = list(arg)
        return sorted(items) if name == "sorted" else tuple(items) if name == "tuple" else items
    if name == "enumerate" and isinstance(arg, list | tuple):
        return list(enumerate(arg))
    return None


def _method(node: ast.Call, env: Env, depth: int, args: list[Any], kwargs: dict[str, Any]) -> Any:
    assert isinstance(node.func, ast.Attribute)
    base = evaluate(node.func.value, env, depth)
    attr = node.func.attr
    if isinstance(base, Unresolved):
        return Unresolved(_text(node))
    if isinstance(base, dict) and attr in {"items", "keys", "values"} and not args:
        return list(getattr(base, attr)())
    if isinstance(base, dict) and attr == "get" and args:
        return base.get(args[0], args[1] if len(args) > 1 else None)
    if isinstance(base, str) and attr in _STR_METHODS:
        if attr == "join" and not (len(args) == 1 and all(isinstance(v, str) for v in args[0])):
            return Unresolved(_text(node))
        return getattr(base, attr)(*args, **kwargs)
    if isinstance(base, PurePath) and attr in {"resolve", "absolute"} and not args:
        return base
    if isinstance(base, PurePath) and attr == "joinpath":
        return base.joinpath(*args)
    return Unresolved(_text(node))
