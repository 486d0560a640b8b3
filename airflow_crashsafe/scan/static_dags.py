"""The DAGs and tasks a file defines, found in its syntax tree (the file is never run).

Walks the module's statements as Airflow would run them, without running them: ``with DAG(...)``,
``dag = DAG(...)`` and ``@dag`` functions open a DAG; ``with TaskGroup(...)`` and ``@task_group``
functions prefix the ids of the tasks inside; an operator call with a ``task_id`` is a task, a call
of a ``@task`` function is a TaskFlow task (``name__1`` on its second call, as Airflow names it),
``.partial(...).expand(...)`` a mapped one; ``for`` loops and comprehensions over values the tree
gives are unrolled, others give one task whose id keeps the unknown part as ``{name}``; calls of
the repository's own functions (DAG and task factories) are followed a few levels deep with their
arguments bound; ``replay_safe(task, reason=...)`` is honoured.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any

from airflow_crashsafe.scan.static_module import StaticModule
from airflow_crashsafe.scan.static_scope import Ctx, FoundDag, FoundTask, bind, bind_call, decorator_kind, kw
from airflow_crashsafe.scan.static_tasks import Replay, TaskMaker
from airflow_crashsafe.scan.static_values import LocalEnv, Unresolved, evaluate, id_text

__all__ = ["FoundDag", "FoundTask", "find_tasks"]

_MAX_INLINE = 3
_MAX_LOOP = 500
_MAPPING_METHODS = {"expand", "expand_kwargs"}


class _Walker:
    """One walk through a module's statements (see the module docstring)."""

    def __init__(self, module: StaticModule) -> None:
        self.root = module
        self.dags: list[FoundDag] = []
        self.maker = TaskMaker(module)
        #: Names bound to a call that made no task the tree shows, and names used in ``>>`` chains.
        self.unmade: dict[str, tuple[ast.Call, Ctx]] = {}
        self.chained: set[str] = set()

    def placeholders(self) -> None:
        """A name used in a ``>>`` chain, made by a call the tree does not show, is an unknown task."""
        for name in sorted(self.chained & set(self.unmade)):
            call, ctx = self.unmade[name]
            self.maker.unreadable(name, call, ctx)

    # -- statements ---------------------------------------------------------------------

    def block(self, stmts: list[ast.stmt], ctx: Ctx) -> None:
        for stmt in stmts:
            self.statement(stmt, ctx)

    def statement(self, stmt: ast.stmt, ctx: Ctx) -> None:
        if isinstance(stmt, ast.With | ast.AsyncWith):
            self.with_(stmt, ctx)
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.define(stmt, ctx)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            self.loop(stmt.target, stmt.iter, ctx, lambda inner: self.block(stmt.body, inner))
        elif isinstance(stmt, ast.If):
            test = evaluate(stmt.test, ctx.env)
            if isinstance(test, Unresolved):
                self.block(stmt.body, ctx)
                self.block(stmt.orelse, ctx)
            else:
                self.block(stmt.body if test else stmt.orelse, ctx)
        elif isinstance(stmt, ast.Try):
            self.block(stmt.body + stmt.orelse + stmt.finalbody, ctx)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            before = self.maker.count
            found = self.expression(stmt.value, ctx)
            made = self.maker.count > before or isinstance(found, FoundTask)
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if not isinstance(target, ast.Name):
                    continue
                self.unmade.pop(target.id, None)
                if isinstance(found, FoundDag):
                    ctx.dags[target.id] = found
                elif isinstance(stmt.value, ast.Call) and not made:
                    self.unmade[target.id] = (stmt.value, ctx)
                if isinstance(ctx.env, LocalEnv):
                    ctx.env.names[target.id] = self.maker.value(stmt.value, ctx)
        elif isinstance(stmt, ast.Return) and stmt.value is not None:
            found = self.expression(stmt.value, ctx)
            if isinstance(stmt.value, ast.Name):
                found = ctx.dags.get(stmt.value.id, found)
            if ctx.returns is not None:
                ctx.returns.append(found)
        elif isinstance(stmt, ast.Expr):
            self.expression(stmt.value, ctx)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):  # in a function body: its own names
            ctx.note_import(stmt)

    def with_(self, stmt: ast.With | ast.AsyncWith, ctx: Ctx) -> None:
        inner = ctx
        for item in stmt.items:
            expr = item.context_expr
            if isinstance(expr, ast.Name) and expr.id in ctx.dags:
                inner = replace(inner, dag=ctx.dags[expr.id], prefix="")
                continue
            if isinstance(expr, ast.Call):
                kind = self.callee_kind(expr, inner)
                if kind == "dag":
                    dag = self.new_dag(expr, inner)
                    inner = replace(inner, dag=dag, prefix="", dags=dict(inner.dags))
                    if isinstance(item.optional_vars, ast.Name):
                        inner.dags[item.optional_vars.id] = dag
                    continue
                if kind == "task_group":
                    inner = replace(inner, prefix=self.group_prefix(expr, inner))
                    continue
            self.expression(expr, inner)
        self.block(stmt.body, inner)

    def define(self, node: ast.FunctionDef | ast.AsyncFunctionDef, ctx: Ctx) -> None:
        ctx.functions[node.name] = node
        for dec in node.decorator_list:
            kind, _, call = decorator_kind(dec, ctx.module)
            if kind == "dag":
                id_node = kw(call, "dag_id")
                dag_id = id_text(id_node, ctx.env) if id_node is not None else node.name
                arguments = self.maker.arguments(call, ctx)[0] if call is not None else {}
                dag = self.add_dag(dag_id, node.lineno, arguments)
                body = replace(ctx.with_env({}), dag=dag, prefix="", functions=dict(ctx.functions))
                self.block(node.body, body)

    def loop(self, target: ast.expr, iterable: ast.expr, ctx: Ctx, body: Any) -> None:
        values = evaluate(iterable, ctx.env)
        if isinstance(values, dict):
            values = list(values)
        names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
        if not isinstance(values, list | tuple) or len(values) > _MAX_LOOP:
            body(ctx.with_env({n: Unresolved(n) for n in names}))
            return
        for value in values:
            body(ctx.with_env(bind(target, value)))

    # -- expressions --------------------------------------------------------------------

    def expression(self, node: ast.expr, ctx: Ctx) -> Any:
        """Walk an expression for the tasks and DAGs it creates; the value of its top call."""
        if isinstance(node, ast.Call):
            return self.call(node, ctx)
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            self.comprehension(node.generators, ctx, lambda inner: self.expression(node.elt, inner))
            return None
        if isinstance(node, ast.DictComp):
            self.comprehension(node.generators, ctx, lambda inner: self.expression(node.value, inner))
            return None
        if isinstance(node, ast.Lambda):
            return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.RShift | ast.LShift):
            for side in (node.left, node.right):
                items = side.elts if isinstance(side, ast.List | ast.Tuple) else [side]
                self.chained.update(i.id for i in items if isinstance(i, ast.Name))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expression(child, ctx)
        return None

    def comprehension(self, gens: list[ast.comprehension], ctx: Ctx, body: Any) -> None:
        if not gens:
            body(ctx)
            return
        first, rest = gens[0], gens[1:]
        self.loop(first.target, first.iter, ctx, lambda inner: self.comprehension(rest, inner, body))

    def callee_kind(self, node: ast.Call, ctx: Ctx) -> str:
        text = ast.unparse(node.func)
        last = text.rsplit(".", 1)[-1]
        ref = ctx.resolve(text) if isinstance(node.func, ast.Name | ast.Attribute) else None
        qual = ref.qualname if ref is not None and ref.kind == "external" else ""
        if last in {"DAG", "TaskGroup"} and (qual.startswith("airflow") or (ref is None and text == last)):
            return "dag" if last == "DAG" else "task_group"
        if last == "replay_safe":
            return "replay_safe"
        return ""

    def call(self, node: ast.Call, ctx: Ctx, replay: Replay = (False, None)) -> Any:
        kind = self.callee_kind(node, ctx)
        if kind == "dag":
            return self.new_dag(node, ctx)
        if kind == "replay_safe" and node.args:
            reason = kw(node, "reason")
            mark = (True, evaluate(reason, ctx.env) if reason is not None else None)
            inner = node.args[0]
            return self.call(inner, ctx, mark) if isinstance(inner, ast.Call) else None
        mapped = self.mapped(node)
        if mapped is not None:
            base, _, expand = mapped
            found = self.task_call(base, ctx, replay, expand=expand)
            if found is None:
                self.walk_args(node, ctx)
            return found
        found = self.task_call(node, ctx, replay)
        if found is not None:
            return found
        return self.plain_call(node, ctx)

    def mapped(self, node: ast.Call) -> tuple[ast.Call, ast.Call | None, ast.Call] | None:
        """``X.partial(...).expand(...)`` / ``f.expand(...)``: (the call standing for X, partial, expand)."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in _MAPPING_METHODS):
            return None
        inner = func.value
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr == "partial"
        ):
            base = ast.Call(func=inner.func.value, args=[], keywords=inner.keywords)
            return ast.copy_location(base, node), inner, node
        return ast.copy_location(ast.Call(func=inner, args=[], keywords=[]), node), None, node

    def task_call(
        self,
        node: ast.Call,
        ctx: Ctx,
        replay: Replay,
        *,
        expand: ast.Call | None = None,
    ) -> FoundTask | None:
        """The task a call makes: a ``@task`` function's (``f.override(...)(...)`` too) or an operator's."""
        target, override = node.func, None
        if (
            isinstance(target, ast.Call)
            and isinstance(target.func, ast.Attribute)
            and target.func.attr == "override"
        ):
            override, target = target, target.func.value
        if not isinstance(target, ast.Name | ast.Attribute):
            return None
        name = ast.unparse(target)
        fn, module = ctx.functions.get(name), ctx.module
        if fn is None:
            ref = ctx.resolve(name)
            if ref is not None and ref.kind == "function" and ref.module is not None:
                fn, module = ref.node, ref.module
        if fn is not None:
            found = self.maker.taskflow(fn, module, node, ctx, replay, override, expand)
            if found is not None:
                self.walk_args(node, ctx)
                if expand is not None:
                    self.walk_args(expand, ctx)
            return found
        if override is not None:
            return None
        return self.maker.operator_task(name, node, ctx, replay, expand)

    def walk_args(self, node: ast.Call, ctx: Ctx) -> None:
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            self.expression(arg, ctx)

    def plain_call(self, node: ast.Call, ctx: Ctx) -> Any:
        """A call that is not a task: walk its arguments, and follow it if it is the repository's function."""
        self.walk_args(node, ctx)
        if isinstance(node.func, ast.Attribute):
            self.expression(node.func.value, ctx)
        elif isinstance(node.func, ast.Call):
            self.expression(node.func, ctx)
        if ctx.depth >= _MAX_INLINE or not isinstance(node.func, ast.Name | ast.Attribute):
            return None
        name = ast.unparse(node.func)
        local = ctx.functions.get(name)
        if local is not None:
            return self.inline(local, ctx.module, node, ctx, nested=True)
        ref = ctx.resolve(name)
        if ref is not None and ref.kind == "function" and ref.module is not None:
            return self.inline(ref.node, ref.module, node, ctx, nested=False)
        return None

    def inline(
        self,
        fn: ast.FunctionDef | ast.AsyncFunctionDef,
        module: StaticModule,
        node: ast.Call,
        ctx: Ctx,
        *,
        nested: bool,
    ) -> Any:
        """Walk a repository function's body with its arguments bound (a DAG or task factory).

        A ``nested`` function (defined in the scope being walked) also sees that scope's names,
        functions and imports, as its closure does.
        """
        kind = next((k for k, _, _ in (decorator_kind(d, module) for d in fn.decorator_list) if k), "")
        if kind in {"task", "dag"}:  # a @dag function was walked where it is defined
            return None
        names = bind_call(fn, node, module, lambda arg: self.maker.value(arg, ctx))
        prefix = ctx.prefix
        if kind == "task_group":
            dec = next(d for d in fn.decorator_list if decorator_kind(d, module)[0] == "task_group")
            call = dec if isinstance(dec, ast.Call) else None
            group = kw(call, "group_id")
            prefix += (id_text(group, ctx.env) if group is not None else fn.name) + "."
        dags = dict(ctx.dags) if module is ctx.module else {}
        for param, arg in zip(fn.args.args, node.args, strict=False):  # a DAG passed in: dag=dag
            if isinstance(arg, ast.Name) and arg.id in ctx.dags:
                dags[param.arg] = ctx.dags[arg.id]
        for keyword in node.keywords:
            if keyword.arg and isinstance(keyword.value, ast.Name) and keyword.value.id in ctx.dags:
                dags[keyword.arg] = ctx.dags[keyword.value.id]
        returned: list[Any] = []
        site = ctx.site or node.lineno
        inner = Ctx(
            module,
            LocalEnv(names, ctx.env if nested else module),
            ctx.dag,
            prefix,
            ctx.depth + 1,
            dags,
            dict(ctx.functions) if nested else {},
            returns=returned,
            site=site,
            imports=dict(ctx.imports) if nested else {},
        )
        self.block(fn.body, inner)
        return next((r for r in returned if r is not None), None)

    # -- DAGs and tasks ------------------------------------------------------------------

    def add_dag(self, dag_id: str, line: int, arguments: dict[str, Any]) -> FoundDag:
        dag = FoundDag(dag_id, line, arguments, str(self.root.path))
        self.dags.append(dag)
        return dag

    def new_dag(self, node: ast.Call, ctx: Ctx) -> FoundDag:
        arguments = self.maker.arguments(node, ctx)[0]
        id_node = node.args[0] if node.args else kw(node, "dag_id")
        given = arguments.get("dag_id")
        if id_node is not None:
            dag_id = id_text(id_node, ctx.env)
        else:  # DAG(**kwargs) in a factory: the id came in the splat
            dag_id = given if isinstance(given, str) else self.root.path.stem
        return self.add_dag(dag_id, node.lineno, arguments)

    def group_prefix(self, node: ast.Call, ctx: Ctx) -> str:
        group = node.args[0] if node.args else kw(node, "group_id")
        flag = evaluate(kw(node, "prefix_group_id"), ctx.env)
        if group is None or flag is False:
            return ctx.prefix
        return f"{ctx.prefix}{id_text(group, ctx.env)}."


def find_tasks(module: StaticModule) -> tuple[list[FoundDag], list[FoundTask]]:
    """The DAGs and tasks ``module`` defines, as far as its syntax tree tells."""
    walker = _Walker(module)
    # the module's own names in the order its statements bind them (TABLE = "a" ... TABLE = "b")
    walker.block(module.tree.body, Ctx(module, LocalEnv({}, module)))
    walker.placeholders()
    return walker.dags, walker.maker.finish(walker.dags)
