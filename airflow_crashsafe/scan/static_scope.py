"""What a walk through a DAG file's syntax tree knows at each point, and the DAGs and tasks it found.

Used by :mod:`.static_dags` (the walk) and :mod:`.static_tasks` (making the tasks).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_crashsafe.scan.static_functions import bind_arguments
from airflow_crashsafe.scan.static_module import Ref, StaticModule
from airflow_crashsafe.scan.static_task import StaticTask, template_dag
from airflow_crashsafe.scan.static_values import Env, LocalEnv, Unresolved

__all__ = ["Ctx", "FoundDag", "FoundTask", "bind", "bind_call", "decorator_kind", "kw"]


@dataclass
class FoundDag:
    """A DAG found in the tree: its id, line, and the arguments its call gave."""

    dag_id: str
    line: int
    arguments: dict[str, Any]
    file: str

    @functools.cached_property
    def template_dag(self) -> Any:
        return template_dag(self.dag_id, self.file, self.arguments)

    @property
    def default_args(self) -> Any:
        return self.arguments.get("default_args") or {}


@dataclass
class FoundTask:
    """A task found in the tree: the stand-in the rules judge, its DAG and the line of its call."""

    task: StaticTask
    dag: FoundDag
    line: int
    file: str
    #: The line in the DAG file of the factory call that made it (None: made in the DAG file itself).
    site: int | None = None
    #: The same task read as each other class its operator name may be (judged too; the worst wins).
    alternatives: list[StaticTask] = field(default_factory=list)


@dataclass
class Ctx:
    """Where the walk is: the module and names in scope, the open DAG, the task group prefix."""

    module: StaticModule
    env: Env
    dag: FoundDag | None = None
    prefix: str = ""
    depth: int = 0
    dags: dict[str, FoundDag] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    #: What the function being followed returns (its ``return`` statements' DAGs and tasks).
    returns: list[Any] | None = None
    #: The line of the call in the DAG file that led into the function being followed.
    site: int | None = None
    #: Names a function imports in its own body (``from dataverk_airflow import python_operator``).
    imports: dict[str, str] = field(default_factory=dict)

    def resolve(self, dotted: str) -> Ref | None:
        """What ``dotted`` refers to here: a name this function imports, else the module's."""
        head, _, rest = dotted.partition(".")
        if head in self.imports:
            return self.module.roots.qualified(".".join(p for p in (self.imports[head], rest) if p))
        return self.module.resolve(dotted)

    def note_import(self, stmt: ast.Import | ast.ImportFrom) -> None:
        """Record an import statement met in a function body."""
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                local = alias.asname or alias.name.split(".")[0]
                self.imports[local] = alias.name if alias.asname else local
            return
        base = self.module.import_base(stmt)
        for alias in stmt.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{base}.{alias.name}"

    def with_env(self, names: dict[str, Any]) -> Ctx:
        return replace(self, env=LocalEnv(names, self.env), dags=dict(self.dags), imports=dict(self.imports))


def decorator_kind(dec: ast.expr, module: StaticModule) -> tuple[str, str, ast.Call | None]:
    """(``task`` | ``dag`` | ``task_group`` | "", the ``@task.<kind>``, the decorator call) of ``dec``."""
    call = dec if isinstance(dec, ast.Call) else None
    text = ast.unparse(dec.func if isinstance(dec, ast.Call) else dec)
    head, _, tail = text.partition(".")
    ref = module.resolve(head)
    full = f"{ref.qualname}.{tail}".rstrip(".") if ref is not None and ref.kind == "external" else text
    parts = full.split(".")
    for i, part in enumerate(parts):
        if part in {"task", "dag", "task_group"} and (i == 0 or parts[0] == "airflow"):
            rest = ".".join(parts[i + 1 :])
            if part == "task" or not rest:
                return part, rest, call
    return "", "", call


def kw(call: ast.Call | None, name: str) -> ast.expr | None:
    if call is None:
        return None
    return next((k.value for k in call.keywords if k.arg == name), None)


def bind(target: ast.expr, value: Any) -> dict[str, Any]:
    if isinstance(target, ast.Name):
        return {target.id: value}
    if isinstance(target, ast.Tuple | ast.List):
        if isinstance(value, list | tuple) and len(value) == len(target.elts):
            out: dict[str, Any] = {}
            for t, v in zip(target.elts, value, strict=True):
                out.update(bind(t, v))
            return out
        return {n.id: Unresolved(n.id) for n in ast.walk(target) if isinstance(n, ast.Name)}
    return {}


def bind_call(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    call: ast.Call,
    module: StaticModule,
    value: Callable[[ast.expr], Any],
) -> dict[str, Any]:
    """The parameters of ``fn`` bound to the call's arguments (``value`` reads one; defaults from
    ``fn``'s module); a ``**`` splat the tree does not give leaves the rest unknown."""
    args: list[Any] = []
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            spread = value(arg.value)
            args.extend(spread if isinstance(spread, list | tuple) else [Unresolved(ast.unparse(arg))])
        else:
            args.append(value(arg))
    kwargs: dict[str, Any] = {}
    for keyword in call.keywords:
        spread = value(keyword.value)
        if keyword.arg is not None:
            kwargs[keyword.arg] = spread
        elif isinstance(spread, dict):
            kwargs.update(spread)
    return bind_arguments(fn.args, args, kwargs, module)
