"""Classify a Python callable (``@task``, ``PythonOperator``, a custom ``execute``) from its source.

The callable's source is read with :mod:`inspect` and walked with :mod:`ast`; nothing runs. Each
call that reaches outside is a finding: the calls :mod:`.calls` names (mutating HTTP without a
run-derived key, mail and chat, queue publishes, object writes, job submissions, SQL through a
cursor or hook, classified by :mod:`.sql` with all statements of the callable as one
transaction), then calls into a library judged by what the scan knows of it (:mod:`.libraries`:
a library it cannot see into is ``unknown``, never pure). Calls into the user's own functions are
followed a few levels deep, with the arguments they were given; a callable whose source cannot be
read is ``unknown``. Calls inside ``with effect(...)`` or ``with fenced_transaction(...)`` are
protected.
"""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from airflow_crashsafe.scan import exprs
from airflow_crashsafe.scan.binder import Binder
from airflow_crashsafe.scan.call_names import RUN_SCOPED
from airflow_crashsafe.scan.calls import classify_call
from airflow_crashsafe.scan.fixes import effect_fix_for_callback
from airflow_crashsafe.scan.libraries import family_of_module, judge_library_call
from airflow_crashsafe.scan.missing import inserts_only_missing
from airflow_crashsafe.scan.model import Finding, Reason
from airflow_crashsafe.scan.scope import module_of, task_class
from airflow_crashsafe.scan.source_modules import file_imports, function_source
from airflow_crashsafe.scan.sql import SqlFacts

__all__ = ["Scope", "analyze_callable"]

_MAX_DEPTH = 3
#: What ``super().execute(context)`` does in a custom operator: the findings of its parent's rule.
SuperRule = Callable[["Scope", ast.Call], list[Finding]]


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
    on_super: SuperRule | None = None
    render: Callable[[Any], Any] | None = None
    #: Functions that also run as DAG or task callbacks (no task context there), and the task's id.
    callbacks: set[int] = field(default_factory=set)
    task_id: str = "task"


def analyze_callable(
    fn: Callable[..., Any],
    *,
    markers: Collection[str],
    dialect_hint: str | None = None,
    values: dict[str, Any] | None = None,
    bound: Any = None,
    render: Callable[[Any], Any] | None = None,
    on_super: SuperRule | None = None,
    callbacks: set[int] | None = None,
    task_id: str = "task",
) -> list[Finding]:
    """The findings of ``fn``'s body and of the user functions it calls; unknown if unreadable.

    ``values``: parameters known as Python values (``op_kwargs``, already rendered). ``bound``:
    the task a custom operator's method runs on, whose attributes ``self.x`` are (``render``
    renders its template fields). ``on_super``: what ``super().execute(...)`` does. ``callbacks``:
    ids of functions that also serve as callbacks, whose fixes must not put ``effect()`` inside.
    """
    walk = _Walk(
        markers,
        dialect_hint,
        on_super=on_super,
        render=render,
        callbacks=set(callbacks or ()),
        task_id=task_id,
    )
    _analyze(fn, walk, 0, values=dict(values or {}), bound=bound)
    return walk.findings


def _unpartial(fn: Any, values: dict[str, Any]) -> Any:
    """The function under ``functools.partial`` layers, its bound arguments added to ``values``."""
    while isinstance(fn, functools.partial):
        try:
            names = list(inspect.signature(fn.func).parameters)
        except (TypeError, ValueError):
            names = []
        for name, value in zip(names, fn.args, strict=False):
            values.setdefault(name, value)
        for name, value in fn.keywords.items():
            values.setdefault(name, value)
        fn = fn.func
    return fn


def _analyze(
    fn: Any,
    walk: _Walk,
    depth: int,
    *,
    args: dict[str, tuple[Scope, ast.expr]] | None = None,
    values: dict[str, Any] | None = None,
    bound: Any = None,
    in_callback: bool = False,
) -> None:
    values = dict(values or {})
    in_callback = in_callback or id(fn) in walk.callbacks
    fn = inspect.unwrap(_unpartial(fn, values))
    if id(fn) in walk.seen:
        return
    walk.seen.add(id(fn))
    found = function_source(fn)
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
    scope = Scope(fn, node, file, offset, walk, depth, args=args, values=values, bound=bound)
    scope.in_callback = in_callback or id(fn) in walk.callbacks
    scope.run()


_UNREAD_SUPER = Finding(
    "unknown",
    "unknown_operator",
    [Reason("super().execute(): the parent operator's work is not read here")],
    "replay_safe(task, reason=...) if it is harmless to repeat",
)


class Scope(Binder):
    """One function body: resolves names against its bindings, its arguments and its module's globals."""

    def __init__(
        self,
        fn: Any,
        node: ast.AST,
        file: str,
        offset: int,
        walk: _Walk,
        depth: int,
        *,
        args: dict[str, tuple[Scope, ast.expr]] | None = None,
        values: dict[str, Any] | None = None,
        bound: Any = None,
    ) -> None:
        self.fn = fn
        self.node = node
        self.file = file
        self.offset = offset
        self.walk = walk
        self.depth = depth
        self.globals: dict[str, Any] = getattr(fn, "__globals__", {}) or {}
        self.args = dict(args or {})
        self.values = dict(values or {})
        self.bound = bound
        self.render = walk.render
        self.in_callback = False
        self.protected = 0
        #: Tests of the ``if`` statements around the statement being visited (``not t`` in an else).
        self.guards: list[ast.expr] = []
        self.init_names(node)
        params = getattr(node, "args", None)
        names = [a.arg for a in (params.posonlyargs + params.args + params.kwonlyargs)] if params else []
        self.params = set(names)
        self.run_scoped = {n for n in names if n in RUN_SCOPED} | {
            n for n, v in self.values.items() if any(m in str(v) for m in walk.markers)
        }
        if params is not None:  # defaults are what a parameter holds when no caller gave it
            positional = params.posonlyargs + params.args
            for arg, default in zip(
                positional[len(positional) - len(params.defaults) :], params.defaults, strict=True
            ):
                if arg.arg not in self.args and arg.arg not in self.values:
                    self.args[arg.arg] = (self, default)
            for arg, default in zip(params.kwonlyargs, params.kw_defaults, strict=True):
                if default is not None and arg.arg not in self.args and arg.arg not in self.values:
                    self.args[arg.arg] = (self, default)

    def visit_With(self, node: ast.With) -> None:
        guarded = any(exprs.is_protection(exprs.dotted(item.context_expr)) for item in node.items)
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, item.context_expr)
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
        self._block(node.body)
        if guarded:
            self.protected -= 1

    visit_AsyncWith = visit_With  # type: ignore[assignment]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.generic_visit(node)  # a nested helper: its calls are this callable's calls

    # -- calls -------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        self._note_growth(node)
        name = exprs.dotted(node.func)
        if name == "super().execute":  # the parent operator's work, with what this method set
            self._super_execute(node)
            return
        finding = classify_call(node, name, self)
        if finding is None and not self.follow(node, name):
            finding = self._library_call(node, name)
        if finding is not None:
            self.add(self._guarded(finding), node)
        self._follow_passed_functions(node)

    def _super_execute(self, node: ast.Call) -> None:
        """The parent's ``execute``: walked when it is the team's own, else judged by ``on_super``."""
        parent = self._parent_execute()
        if parent is not None and self.is_user_code(parent):
            if self.depth < _MAX_DEPTH:
                values = {f"self.{k}": v for k, v in self.self_fields().items()}
                _analyze(
                    parent,
                    self.walk,
                    self.depth + 1,
                    values=values,
                    bound=self.bound,
                    in_callback=self.in_callback,
                )
            return
        found = self.walk.on_super(self, node) if self.walk.on_super is not None else [_UNREAD_SUPER]
        for finding in found:
            copy = Finding(finding.verdict, finding.category, list(finding.reasons), finding.fix)
            self.add(self._guarded(copy), node)

    def _parent_execute(self) -> Any:
        """The ``execute`` that ``super().execute`` reaches from this method, if the classes are known."""
        owner_name = (getattr(self.fn, "__qualname__", "") or "").split(".")[0]
        mro = task_class(self.bound).__mro__ if self.bound is not None else ()
        if not mro:
            owner = self.globals.get(owner_name)
            mro = owner.__mro__ if isinstance(owner, type) else ()
        past_owner = False
        for klass in mro:
            if past_owner and "execute" in vars(klass):
                return vars(klass)["execute"]
            if klass.__name__ == owner_name and "execute" in vars(klass):
                past_owner = True
        return None

    def _guarded(self, finding: Finding) -> Finding:
        if self.protected and finding.verdict in {"risky", "unknown"}:
            return Finding("protected", "crashsafe_helper", finding.reasons)
        return finding

    def _library_call(self, node: ast.Call, name: str) -> Finding | None:
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else node.func
        if name.startswith("super()"):
            return None
        origin = self.origin(receiver)
        if origin is None:
            return None
        root = name.split(".")[0]
        imported = "()" not in name and (
            root in self.imports or (self.globals.get(root) is None and root in file_imports(self.file))
        )
        if imported and family_of_module(origin) == "user" and self._root(root) is None:
            return Finding(  # the team's own code, imported but not found where the scan runs
                "unknown",
                "unreadable_callable",
                [Reason(f"{name}: the team's code in {origin} could not be read here", exprs.snippet(node))],
                "make the module importable where the scan runs, or replay_safe(task, reason=...)",
            )
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else name.rsplit(".", 1)[-1]
        return judge_library_call(node, attr, origin, self)

    def add(self, finding: Finding, node: ast.AST) -> None:
        if (
            finding.category == "append"
            and isinstance(node, ast.Call)
            and inserts_only_missing(node, self, self.guards)
        ):
            why = "inserts only what the target does not hold yet (it reads the target first)"
            finding = Finding("safe", "insert_missing", [Reason(why, exprs.snippet(node))])
        finding.reasons = [r.located(self.file, self.line(node)) for r in finding.reasons]
        if self.in_callback and "effect(" in finding.fix:
            name = getattr(self.fn, "__name__", "it")
            finding.fix = effect_fix_for_callback(name, self.walk.task_id)
        self.walk.findings.append(finding)

    def is_user_code(self, target: Any) -> bool:
        module = module_of(target) or ""
        return family_of_module(module) == "user" if module else False

    def follow(self, node: ast.Call, name: str) -> bool:
        """Walk into a user function called here, its parameters bound to this call's arguments.

        True when the call is the user's own code (walked, or too deep to walk); False for a
        library (:mod:`.libraries` judges those) or a name that does not resolve.
        """
        if not name:
            return False
        target = self.resolve(node.func)
        if target is None or not callable(target) or inspect.isclass(target) or not self.is_user_code(target):
            return False
        if self.depth >= _MAX_DEPTH:
            return True
        before = len(self.walk.findings)
        method = isinstance(node.func, ast.Attribute) and not inspect.ismodule(self.resolve(node.func.value))
        _analyze(
            target,
            self.walk,
            self.depth + 1,
            args=self._call_args(target, node, method),
            bound=self._bound_for(node),
            in_callback=self.in_callback,
        )
        if self.protected:
            for finding in self.walk.findings[before:]:
                if finding.verdict in {"risky", "unknown"}:
                    finding.verdict, finding.category, finding.fix = "protected", "crashsafe_helper", ""
        return True

    def _bound_for(self, node: ast.Call) -> Any:
        """The task a method called on ``self`` runs on (a custom operator's own helpers)."""
        root = exprs.dotted(node.func).split(".")[0]
        return self.bound if root == "self" else None

    def _call_args(self, target: Any, node: ast.Call, method: bool) -> dict[str, tuple[Scope, ast.expr]]:
        try:
            params = list(inspect.signature(target).parameters.values())
        except (TypeError, ValueError):
            return {}
        if method and params and params[0].name in {"self", "cls"}:
            params = params[1:]
        out: dict[str, tuple[Scope, ast.expr]] = {}
        for param, arg in zip(params, node.args, strict=False):
            if isinstance(arg, ast.Starred) or param.kind in {param.VAR_POSITIONAL, param.VAR_KEYWORD}:
                break
            out[param.name] = (self, arg)
        for keyword in node.keywords:
            if keyword.arg:
                out[keyword.arg] = (self, keyword.value)
        return out

    def _follow_passed_functions(self, node: ast.Call) -> None:
        """A user function handed to another call (``executor.map(push, rows)``) runs too: walk it."""
        if self.depth >= _MAX_DEPTH:
            return
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            if not isinstance(arg, ast.Name | ast.Attribute):
                continue
            target = self.resolve(arg)
            if target is not None and inspect.isfunction(target) and self.is_user_code(target):
                _analyze(target, self.walk, self.depth + 1, in_callback=self.in_callback)

    def string_of(self, node: ast.expr | None) -> str | None:
        """The text of a string expression: literals, f-strings, names, ``+``, ``.format``, ``.join``."""
        return exprs.string_value(node, self)
