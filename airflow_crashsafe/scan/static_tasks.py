"""Making the stand-in tasks of a file that did not import: operator calls and ``@task`` function calls.

A call is a task when what it calls resolves to an operator class (one whose MRO has
``BaseOperator``: installed, mirrored or a stand-in, :mod:`.static_classes`) and it gives a
``task_id`` (or a ``**`` splat that may hold one), or when it calls a ``@task`` function. The
arguments are read with :func:`.static_values.evaluate`; names of functions become static
functions (:mod:`.static_module`), so ``python_callable=load`` is read from ``load``'s source. The
DAG's ``default_args`` go under the call's own arguments, and an argument renamed in Airflow 3
(``postgres_conn_id``) is also given under its new name.
"""

from __future__ import annotations

import ast
from typing import Any

from airflow_crashsafe.scan.static_classes import ClassInfo, decorated_class, external_class, stand_in
from airflow_crashsafe.scan.static_module import StaticModule
from airflow_crashsafe.scan.static_scope import Ctx, FoundDag, FoundTask, decorator_kind, kw
from airflow_crashsafe.scan.static_task import StaticTask
from airflow_crashsafe.scan.static_values import Unresolved, evaluate, id_text

__all__ = ["TaskMaker"]

Replay = tuple[bool, Any]
Mapped = tuple[dict[str, Any], dict[str, Any]]


class TaskMaker:
    """The tasks of one file, in the order their calls are met, each (DAG, task id) once."""

    def __init__(self, module: StaticModule) -> None:
        self.root = module
        self.tasks: list[FoundTask] = []
        self._seen: dict[tuple[str, str], FoundTask] = {}
        self._loose: list[FoundTask] = []

    def arguments(self, call: ast.Call, ctx: Ctx) -> tuple[dict[str, Any], str]:
        """The call's keyword arguments' values, and the text of a ``**`` splat the tree does not give."""
        out: dict[str, Any] = {}
        opened = ""
        for keyword in call.keywords:
            value = self.value(keyword.value, ctx)
            if keyword.arg is not None:
                out[keyword.arg] = value
            elif isinstance(value, dict):
                out.update(value)
            else:
                opened = f"**{ast.unparse(keyword.value)}"
        return out, opened

    def value(self, node: ast.expr, ctx: Ctx) -> Any:
        value = evaluate(node, ctx.env)
        if not isinstance(value, Unresolved):
            return value
        fn = self.callable_of(node, ctx)
        return fn if fn is not None else value

    def callable_of(self, node: ast.expr, ctx: Ctx) -> Any:
        """A static function for ``f``, ``module.f``, ``Class.method``, a lambda or ``partial(f, ...)``."""
        if isinstance(node, ast.Lambda):
            return ctx.module.function(node)
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("partial") and node.args:
            inner = self.callable_of(node.args[0], ctx)
            return inner  # the function partial() wraps: its source is what a run executes
        if not isinstance(node, ast.Name | ast.Attribute):
            return None
        name = ast.unparse(node)
        local = ctx.functions.get(name)
        if local is not None:
            return ctx.module.function(local)
        ref = ctx.module.resolve(name)
        if ref is not None and ref.kind in {"function", "method"} and ref.module is not None:
            return ref.module.function(ref.node, ref.qualname)
        return None

    def operator_task(
        self, name: str, node: ast.Call, ctx: Ctx, replay: Replay, expand: ast.Call | None
    ) -> FoundTask | None:
        """The task an operator call makes (None when ``name`` is no operator or no id is given)."""
        info = self.operator(name, node, ctx)
        if info is None:
            return None
        arguments, opened = self.arguments(node, ctx)
        mapped: Mapped | None = None
        if expand is not None:
            expanded, more = self.arguments(expand, ctx)
            opened = opened or more
            mapped = (dict(arguments), expanded)
        id_node = kw(node, "task_id")
        if id_node is None and not opened:
            return None
        task_id = ctx.prefix + (id_text(id_node, ctx.env) if id_node is not None else "{task_id}")
        return self.add(task_id, info, arguments, opened, node, ctx, replay, mapped)

    def operator(self, name: str, node: ast.Call, ctx: Ctx) -> ClassInfo | None:
        last = name.rsplit(".", 1)[-1]
        named = any(k.arg == "task_id" or k.arg is None for k in node.keywords)
        if not named and not last.endswith(("Operator", "Sensor", "SensorAsync")):
            return None
        ref = ctx.module.resolve(name)
        if ref is None:
            return None
        if ref.kind == "class" and ref.module is not None:
            cls = ctx.module.roots.class_of(ref)
            written = f"{ref.module.dotted or ref.module.path.stem}.{ref.node.name}"
            info = ClassInfo(cls, written)
        elif ref.kind == "external":
            info = external_class(ref.qualname, ctx.module.roots.is_repo)
        else:
            return None
        names = {c.__name__ for c in info.cls.__mro__}
        return info if "BaseOperator" in names else None

    def taskflow(
        self,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        module: StaticModule,
        call_node: ast.Call,
        ctx: Ctx,
        replay: Replay,
        override: ast.Call | None,
        expand: ast.Call | None,
    ) -> FoundTask | None:
        """The task a call of the ``@task`` function ``fn`` makes (None if ``fn`` is not one)."""
        found = next(
            (k for k in (decorator_kind(d, module) for d in fn.decorator_list) if k[0] == "task"), None
        )
        if found is None:
            return None
        _, kind, call = found
        info = decorated_class(kind)
        arguments, opened = self.arguments(call, ctx) if call is not None else ({}, "")
        if override is not None:
            more, extra = self.arguments(override, ctx)
            arguments.update(more)
            opened = opened or extra
        arguments["python_callable"] = module.function(fn) or Unresolved(f"the function {fn.name}")
        if kind in {"bash"}:
            arguments.setdefault("bash_command", Unresolved(f"the string {fn.name}() returns"))
        task_id = arguments.get("task_id")
        base = task_id if isinstance(task_id, str) else fn.name
        mapped: Mapped | None = None
        if expand is not None:
            expanded, more_open = self.arguments(expand, ctx)
            mapped = ({}, expanded)
            opened = opened or more_open
        return self.add(
            ctx.prefix + base, info, arguments, opened, call_node, ctx, replay, mapped, unique=True
        )

    def add(
        self,
        task_id: str,
        info: ClassInfo,
        arguments: dict[str, Any],
        opened: str,
        node: ast.Call,
        ctx: Ctx,
        replay: Replay,
        mapped: Mapped | None,
        *,
        unique: bool = False,
    ) -> FoundTask | None:
        dag = ctx.dag
        arguments.pop("dag", None)
        target = kw(node, "dag")
        if isinstance(target, ast.Name) and target.id in ctx.dags:
            dag = ctx.dags[target.id]
        for old, new in info.arguments.items():
            if old in arguments and new not in arguments:
                arguments[new] = arguments[old]
        holder = dag or FoundDag("", node.lineno, {}, str(self.root.path))
        defaults = holder.default_args
        if isinstance(defaults, dict):
            arguments = {**{k: v for k, v in defaults.items() if k not in {"dag"}}, **arguments}
        elif isinstance(defaults, Unresolved):
            opened = opened or f"default_args={defaults.text}"
        if mapped is not None:
            mapped = ({**arguments, **mapped[0]}, mapped[1])
        if unique:
            task_id = self.unique(holder.dag_id, task_id)
        key = (holder.dag_id, task_id)
        if key in self._seen and dag is not None:  # the same task again (a branch, a loop): the first
            return self._seen[key]
        task = StaticTask(
            task_id=task_id,
            info=info,
            arguments=arguments,
            dag=None,
            open_arguments=opened,
            mapped=mapped,
            replay_safe=replay,
        )
        found = FoundTask(task, holder, node.lineno, str(ctx.module.path))
        self._seen[key] = found
        (self.tasks if dag is not None else self._loose).append(found)
        return found

    @property
    def count(self) -> int:
        return len(self.tasks) + len(self._loose)

    def unreadable(self, name: str, call: ast.Call, ctx: Ctx) -> FoundTask | None:
        """An ``unknown`` task for ``name = call(...)``, used as a task, made where the tree cannot show."""
        callee = ast.unparse(call.func).rsplit(".", 1)[-1] or "call"
        why = (
            f"{name} = {ast.unparse(call.func)}(...) is used as a task in a >> chain, but the syntax tree "
            "does not show what it makes"
        )
        info = ClassInfo(stand_in(callee, "", why), ast.unparse(call.func))
        return self.add(f"{ctx.prefix}{{{name}}}", info, {}, "", call, ctx, (False, None), None)

    def unique(self, dag_id: str, task_id: str) -> str:
        if (dag_id, task_id) not in self._seen:
            return task_id
        n = 1
        while (dag_id, f"{task_id}__{n}") in self._seen:
            n += 1
        return f"{task_id}__{n}"

    def finish(self, dags: list[FoundDag]) -> list[FoundTask]:
        """Tasks made outside any DAG join the file's first DAG (``dag=`` passed some other way)."""
        if self._loose:
            fallback = dags[0] if dags else FoundDag(self.root.path.stem, 1, {}, str(self.root.path))
            for found in self._loose:
                found.dag = fallback
                self.tasks.append(found)
        for found in self.tasks:
            found.task.__dict__["dag"] = found.dag.template_dag
        return self.tasks
