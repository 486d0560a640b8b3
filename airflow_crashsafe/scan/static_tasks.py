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
from collections.abc import Sequence
from typing import Any

from airflow_crashsafe.scan.static_classes import ClassInfo, decorated_class, external_class, stand_in
from airflow_crashsafe.scan.static_module import Ref, StaticModule
from airflow_crashsafe.scan.static_scope import Ctx, FoundDag, FoundTask, decorator_kind, kw
from airflow_crashsafe.scan.static_task import StaticTask
from airflow_crashsafe.scan.static_values import Unresolved, evaluate, has_unresolved, id_text

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
        ref = ctx.resolve(name)
        if ref is not None and ref.kind in {"function", "method"} and ref.module is not None:
            return ref.module.function(ref.node, ref.qualname)
        return None

    def operator_task(
        self, name: str, node: ast.Call, ctx: Ctx, replay: Replay, expand: ast.Call | None
    ) -> FoundTask | None:
        """The task an operator call makes (None when ``name`` is no operator or no id is given)."""
        infos = self.operator(name, node, ctx)
        if not infos:
            return self.library_factory(name, node, ctx, replay)
        info = infos[0]
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
        return self.add(task_id, info, arguments, opened, node, ctx, replay, mapped, alternatives=infos[1:])

    def library_factory(self, name: str, node: ast.Call, ctx: Ctx, replay: Replay) -> FoundTask | None:
        """A library's function given ``dag=`` a DAG and an id (``task_id=`` or ``name=``): an unknown task.

        What the function makes is not in the repository, so the task is named and left unknown.
        """
        target = kw(node, "dag")
        id_node = kw(node, "task_id") or kw(node, "name")
        if not (isinstance(target, ast.Name) and target.id in ctx.dags) or id_node is None:
            return None
        ref = ctx.resolve(name)
        if ref is None or ref.kind != "external":
            return None
        why = f"{ref.qualname}(dag=..., ...) makes a task in a library, whose code the scan does not read"
        info = ClassInfo(stand_in(name.rsplit(".", 1)[-1], "", why), ref.qualname)
        task_id = ctx.prefix + id_text(id_node, ctx.env)
        return self.add(task_id, info, {}, "", node, ctx, replay, None, defaults=False)

    def operator(self, name: str, node: ast.Call, ctx: Ctx) -> list[ClassInfo]:
        """The operator classes ``name`` may be (several: ``Op = A if cond else B`` with ``cond`` unknown)."""
        last = name.rsplit(".", 1)[-1]
        named = any(k.arg == "task_id" or k.arg is None for k in node.keywords)
        if not named and not last.endswith(("Operator", "Sensor", "SensorAsync")):
            return []
        infos = self.classes(ctx.resolve(name), ctx, 0)
        return [i for i in infos if "BaseOperator" in {c.__name__ for c in i.cls.__mro__}]

    def classes(self, ref: Ref | None, ctx: Ctx, depth: int) -> list[ClassInfo]:
        """The classes a reference may stand for: a class, an installed name, or an alias of either."""
        if ref is None or depth > 4:
            return []
        if ref.kind == "class" and ref.module is not None:
            written = f"{ref.module.dotted or ref.module.path.stem}.{ref.node.name}"
            return [ClassInfo(ctx.module.roots.class_of(ref), written)]
        if ref.kind == "external":
            return [external_class(ref.qualname, ctx.module.roots.is_repo)]
        if ref.kind != "value" or ref.module is None:
            return []
        node, module = ref.node, ref.module
        if isinstance(node, ast.IfExp):
            test = evaluate(node.test, module)
            branches = (
                [node.body, node.orelse] if has_unresolved(test) else [node.body if test else node.orelse]
            )
        else:
            branches = [node]
        out: list[ClassInfo] = []
        for branch in branches:
            if isinstance(branch, ast.Name | ast.Attribute):
                out += self.classes(module.resolve(ast.unparse(branch)), ctx, depth + 1)
        return out

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
        defaults: bool = True,
        alternatives: Sequence[ClassInfo] = (),
    ) -> FoundTask | None:
        dag = ctx.dag
        arguments.pop("dag", None)
        target = kw(node, "dag")
        if isinstance(target, ast.Name) and target.id in ctx.dags:
            dag = ctx.dags[target.id]
        for old, new in [*info.arguments.items(), *(a for i in alternatives for a in i.arguments.items())]:
            if old in arguments and new not in arguments:
                arguments[new] = arguments[old]
        holder = dag or FoundDag("", node.lineno, {}, str(self.root.path))
        given = holder.default_args if defaults else {}
        if isinstance(given, dict):
            arguments = {**{k: v for k, v in given.items() if k not in {"dag"}}, **arguments}
        elif isinstance(given, Unresolved):
            opened = opened or f"default_args={given.text}"
        if mapped is not None:
            mapped = ({**arguments, **mapped[0]}, mapped[1])
        if unique:
            task_id = self.unique(holder.dag_id, task_id)
        key = (holder.dag_id, task_id)
        if key in self._seen and dag is not None:  # the same task again (a branch, a loop): the first
            return self._seen[key]
        tasks = [
            StaticTask(
                task_id=task_id,
                info=one,
                arguments=arguments,
                dag=None,
                open_arguments=opened,
                mapped=mapped,
                replay_safe=replay,
            )
            for one in [info, *alternatives]
        ]
        found = FoundTask(tasks[0], holder, node.lineno, str(ctx.module.path), ctx.site, tasks[1:])
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
        return self.add(
            f"{ctx.prefix}{{{name}}}", info, {}, "", call, ctx, (False, None), None, defaults=False
        )

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
            for task in [found.task, *found.alternatives]:
                task.__dict__["dag"] = found.dag.template_dag
        return self.tasks
