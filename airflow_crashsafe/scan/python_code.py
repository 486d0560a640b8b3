"""Classify a Python callable (``@task``, ``PythonOperator``, a custom ``execute``) from its source.

The callable's source is read with :mod:`inspect` and walked with :mod:`ast`; nothing runs. Each
call that reaches outside is a finding (:mod:`.calls` names them): mutating HTTP without a
run-derived key, mail and chat, queue publishes, object writes under random names, job
submissions without a client token, SQL through a cursor or hook (classified by :mod:`.sql`, all
statements of the callable as one transaction). Calls into the user's own functions are followed
a few levels deep; a callable whose source cannot be read is ``unknown``. Calls inside
``with effect(...)`` or ``with fenced_transaction(...)`` are protected.
"""

from __future__ import annotations

import ast
import inspect
import sys
import sysconfig
import textwrap
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_crashsafe.scan import exprs
from airflow_crashsafe.scan.call_names import RUN_SCOPED
from airflow_crashsafe.scan.calls import classify_call
from airflow_crashsafe.scan.model import Finding, Reason
from airflow_crashsafe.scan.sql import SqlFacts

__all__ = ["Scope", "analyze_callable"]

_MAX_DEPTH = 3
_LIBRARY_ROOTS = tuple(
    str(Path(p).resolve())
    for p in {
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        sysconfig.get_paths()["stdlib"],
    }
)


def _is_library(fn: Any) -> bool:
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if path is None:
        return True  # builtins
    resolved = str(Path(path).resolve())
    return resolved.startswith(_LIBRARY_ROOTS) or (getattr(fn, "__module__", "") or "").startswith(
        "airflow_crashsafe."
    )


@dataclass
class _Walk:
    """State shared by one callable's walk and the user functions it calls."""

    markers: Collection[str]
    dialect_hint: str | None
    findings: list[Finding] = field(default_factory=list)
    sql: SqlFacts = field(default_factory=SqlFacts)
    seen: set[int] = field(default_factory=set)
    #: The code switched its connection to autocommit: each statement commits alone.
    autocommit: bool = False


def analyze_callable(
    fn: Callable[..., Any], *, markers: Collection[str], dialect_hint: str | None = None
) -> list[Finding]:
    """The findings of ``fn``'s body and of the user functions it calls; unknown if unreadable."""
    walk = _Walk(markers, dialect_hint)
    _analyze(fn, walk, depth=0)
    return walk.findings


def _source(fn: Any) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, str, int] | None:
    try:
        lines, first = inspect.getsourcelines(fn)
        file = inspect.getsourcefile(fn) or "?"
    except (OSError, TypeError):
        return None
    text = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node, file, first - 1
        if isinstance(node, ast.Lambda):
            return node, file, first - 1
    return None


def _analyze(fn: Any, walk: _Walk, depth: int) -> None:
    fn = inspect.unwrap(fn)
    if id(fn) in walk.seen:
        return
    walk.seen.add(id(fn))
    found = _source(fn)
    if found is None:
        name = getattr(fn, "__qualname__", repr(fn))
        walk.findings.append(
            Finding(
                "unknown",
                "unreadable_callable",
                [Reason(f"the source of {name} cannot be read, so what it does is not known", name)],
                "if it is safe to run twice, replay_safe(task, reason=...); "
                "else wrap its side effect in effect()",
            )
        )
        return
    node, file, offset = found
    scope = Scope(fn, node, file, offset, walk, depth)
    scope.run()


class Scope(ast.NodeVisitor):
    """One function body: resolves names against its assignments and its module's globals."""

    def __init__(self, fn: Any, node: ast.AST, file: str, offset: int, walk: _Walk, depth: int) -> None:
        self.fn = fn
        self.node = node
        self.file = file
        self.offset = offset
        self.walk = walk
        self.depth = depth
        self.globals: dict[str, Any] = getattr(fn, "__globals__", {}) or {}
        self.assigned: dict[str, ast.expr] = {}
        self.protected = 0
        args = getattr(node, "args", None)
        self.run_scoped = (
            {a.arg for a in (args.args + args.kwonlyargs) if a.arg in RUN_SCOPED} if args else set()
        )

    def run(self) -> None:
        body = getattr(self.node, "body", [])
        body = body if isinstance(body, list) else [body]  # a lambda's body is one expression
        for stmt in body:
            self.visit(stmt)

    def line(self, node: ast.AST) -> int:
        return int(getattr(node, "lineno", 1)) + self.offset

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.assigned[target.id] = node.value
        self._note_autocommit(node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.generic_visit(node)

    def _note_autocommit(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr == "autocommit":
                self.walk.autocommit = isinstance(node.value, ast.Constant) and node.value.value is True

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            self.assigned[node.target.id] = node.value
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        guarded = any(exprs.is_protection(exprs.dotted(item.context_expr)) for item in node.items)
        for item in node.items:
            self.visit(item.context_expr)
        if guarded:
            self.protected += 1
            self.add(
                Finding(
                    "protected",
                    "crashsafe_helper",
                    [
                        Reason(
                            "inside a crashsafe effect/fenced block",
                            exprs.snippet(node.items[0].context_expr),
                        )
                    ],
                ),
                node,
            )
        for stmt in node.body:
            self.visit(stmt)
        if guarded:
            self.protected -= 1

    visit_AsyncWith = visit_With  # type: ignore[assignment]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.generic_visit(node)  # a nested helper: its calls are this callable's calls

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        name = exprs.dotted(node.func)
        finding = classify_call(node, name, self)
        if finding is not None:
            if self.protected and finding.verdict in {"risky", "unknown"}:
                finding = Finding("protected", "crashsafe_helper", finding.reasons)
            self.add(finding, node)
            return
        self.follow(node, name)

    def add(self, finding: Finding, node: ast.AST) -> None:
        finding.reasons = [r.located(self.file, self.line(node)) for r in finding.reasons]
        self.walk.findings.append(finding)

    def _root(self, root: str) -> Any:
        """What the first name of a dotted call is: a global, ``self``'s class, a local instance's class."""
        if root.endswith("()"):  # Exporter(...).ship(...): the class
            return self.globals.get(root[:-2])
        if root == "self":
            owner = (getattr(self.fn, "__qualname__", "") or "").split(".")[0]
            return self.globals.get(owner)
        if root in self.assigned:
            value = self.assigned[root]
            if isinstance(value, ast.Call):  # client = PartnerClient(): the class's methods
                cls = self.resolve(value.func)
                return cls if inspect.isclass(cls) else None
            return None
        return self.globals.get(root)

    def resolve(self, node: ast.expr) -> Any:
        """The object a call's name refers to (a function, a method of a known class), else None."""
        parts = exprs.dotted(node).split(".")
        if not parts or not parts[0]:
            return None
        obj: Any = self._root(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part.removesuffix("()"), None)
        return obj

    def follow(self, node: ast.Call, name: str) -> None:
        """Walk into a user function called here (not libraries: :mod:`.calls` knows those)."""
        if self.depth >= _MAX_DEPTH or not name:
            return
        target = self.resolve(node.func)
        if target is None or not callable(target) or inspect.isclass(target):
            return
        if _is_library(target):
            return
        before = len(self.walk.findings)
        _analyze(target, self.walk, self.depth + 1)
        if self.protected:
            for finding in self.walk.findings[before:]:
                if finding.verdict in {"risky", "unknown"}:
                    finding.verdict, finding.category = "protected", "crashsafe_helper"

    def string_of(self, node: ast.expr | None) -> str | None:
        """The text of a string expression: literals, f-strings, names, ``+`` and ``.format``."""
        return exprs.string_value(node, self)
