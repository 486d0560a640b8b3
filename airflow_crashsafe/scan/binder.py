"""The statements of a function body that bind names, visited in order (the walker's other half).

Assignments, ``+=``, ``for`` targets, ``with ... as`` and ``lst.append(x)`` bind names as the code
runs, so a call sees each name as it was at that point (:mod:`.names`). ``if`` tests are kept while
their branches are visited (``not test`` in the ``else``, and after ``if test: continue``), so a
write can tell it only runs when a read found nothing (:mod:`.missing`).
"""

from __future__ import annotations

import ast
from typing import Any

from airflow_crashsafe.scan import exprs
from airflow_crashsafe.scan.names import target_key
from airflow_crashsafe.scan.scope import Names

__all__ = ["PER_ATTEMPT", "Binder"]


class Binder(Names, ast.NodeVisitor):
    """Binds names as the body runs; :class:`~airflow_crashsafe.scan.python_code.Scope` judges the calls."""

    node: ast.AST
    offset: int
    guards: list[ast.expr]
    walk: Any  # the walk's shared state (python_code._Walk): the autocommit flag

    @property
    def assigned(self) -> dict[str, ast.expr]:
        """The latest value bound to each local name (for callers that only ask "is it bound")."""
        out: dict[str, ast.expr] = {}
        for key in self.names.keys():  # noqa: SIM118 (Bindings, not a dict)
            with self.names.read(key) as value:
                if value is not None:
                    out[key] = value
        return out

    def run(self) -> None:
        body = getattr(self.node, "body", [])
        if not isinstance(body, list):  # a lambda's body is one expression
            self.visit(body)
            return
        self._block(body)

    def _block(self, stmts: list[ast.stmt]) -> None:
        """Statements in order; after ``if <test>: continue`` (or return) the rest runs under ``not test``."""
        pushed = 0
        for stmt in stmts:
            self.visit(stmt)
            if (
                isinstance(stmt, ast.If)
                and not stmt.orelse
                and stmt.body
                and isinstance(stmt.body[-1], ast.Continue | ast.Return | ast.Break | ast.Raise)
            ):
                self.guards.append(ast.UnaryOp(op=ast.Not(), operand=stmt.test))
                pushed += 1
        del self.guards[len(self.guards) - pushed :]

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self.guards.append(node.test)
        self._block(node.body)
        self.guards[-1] = ast.UnaryOp(op=ast.Not(), operand=node.test)
        self._block(node.orelse)
        self.guards.pop()

    def line(self, node: ast.AST) -> int:
        return int(getattr(node, "lineno", 1)) + self.offset

    # -- bindings, in the order the code makes them ----------------------------------------

    def _bind(self, target: ast.AST, value: ast.expr) -> None:
        key = target_key(target)
        if key is not None:
            self.names.bind(key, value)
        elif isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            for sub, sub_value in zip(target.elts, value.elts, strict=False):
                self._bind(sub, sub_value)
        elif isinstance(target, ast.Tuple | ast.List):
            for sub in target.elts:  # a, b = f(): each is "some part of f()"
                self._bind(sub, ast.Subscript(value=value, slice=ast.Constant(None), ctx=ast.Load()))

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)  # the value's own calls see the names as they were before
        for target in node.targets:
            self._bind(target, node.value)
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr == "autocommit":
                self.walk.autocommit = isinstance(node.value, ast.Constant) and node.value.value is True

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.generic_visit(node)
        key = target_key(node.target)
        if key is not None:
            load = ast.parse(key, mode="eval").body
            self.names.bind(key, ast.BinOp(left=load, op=node.op, right=node.value))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        if node.value is not None:
            self._bind(node.target, node.value)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self._bind(
            node.target, ast.Subscript(value=node.iter, slice=ast.Constant(exprs.EACH), ctx=ast.Load())
        )
        self._block(node.body)
        self._block(node.orelse)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def _note_growth(self, node: ast.Call) -> None:
        """``stmts.append(sql)`` / ``self.sql.extend([...])`` on a bound list: the list now holds them too."""
        func = node.func
        if (
            not isinstance(func, ast.Attribute)
            or func.attr not in {"append", "extend"}
            or len(node.args) != 1
        ):
            return
        key = target_key(func.value)
        if key is None or key not in self.names:
            return
        added = node.args[0] if func.attr == "append" else ast.Starred(value=node.args[0], ctx=ast.Load())
        before = ast.Starred(value=ast.parse(key, mode="eval").body, ctx=ast.Load())
        self.names.bind(key, ast.List(elts=[before, added], ctx=ast.Load()))

    def self_fields(self) -> dict[str, Any]:
        """The ``self.<field>`` values set before this point (here, or by a subclass's method).

        As text where it can be read; a field built from a clock or a random draw renders
        differently in every attempt; one built from data at run time is text the SQL parser
        reports as unreadable (so its task is unknown, never safe).
        """
        out: dict[str, Any] = {k[5:]: v for k, v in self.values.items() if k.startswith("self.")}
        for key in self.names.keys():  # noqa: SIM118 (Bindings, not a dict)
            if not key.startswith("self.") or key.count(".") != 1:
                continue
            attr = key.split(".", 1)[1]
            text = exprs.string_value(ast.parse(key, mode="eval").body, self)  # type: ignore[arg-type]
            with self.lookup(key) as found:
                random = found is not None and exprs.is_random(found[0], found[1])
                literal = _literal(found[0]) if found is not None and text is None else None
            if text is not None:
                out[attr] = text + PER_ATTEMPT if random else text
            else:
                out[attr] = literal if literal is not None else _RuntimeValue(f"<{key} built at run time>")
        return out


#: Appended to a field built from a clock or a random draw: it renders differently in every attempt.
PER_ATTEMPT = "-{{ ti.id }}"


class _RuntimeValue(str):
    """A field built from data at run time: SQL text the parser reports as unreadable."""


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
