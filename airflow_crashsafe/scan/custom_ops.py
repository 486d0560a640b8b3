"""A team's own operator, defined in the DAG or plugins folder, judged by what its ``execute`` does.

Teams subclass an operator and build its work at run time: ``self.sql = [rename live -> old, new
-> live, DROP old]`` then ``super().execute(context)``. Judging the task by the arguments it was
built with would miss everything ``execute`` sets, so when the operator's class (or a class
between it and the library) defines ``execute``, that method's source is read instead:

- ``self.x`` reads the task's attribute after ``__init__`` (a template field rendered with the
  sample run), or what the method assigned to it before;
- ``super().execute(context)`` is judged by the parent's rule (the SQL operator's, the HTTP
  operator's, a provider operator's), on the task as the method left it: the fields assigned in
  the method replace the task's own; one whose value is built from data at run time is unknown;
- any other call is judged as in a Python callable (hooks running SQL from the operator's own
  attributes, clients, HTTP).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from airflow_crashsafe.scan.context import MARKERS, Renderer
from airflow_crashsafe.scan.libraries import family_of_module
from airflow_crashsafe.scan.model import Finding, Reason, combine
from airflow_crashsafe.scan.operators_known import classify_known
from airflow_crashsafe.scan.python_code import Scope, analyze_callable
from airflow_crashsafe.scan.scope import safe_attr, task_class

__all__ = ["Overlay", "judge_own_execute", "own_execute"]

Rule = Callable[[Any], Finding]


class Overlay:
    """The task as ``execute`` left it before calling ``super().execute``: assigned fields replaced."""

    def __init__(self, task: Any, overrides: dict[str, Any]) -> None:
        object.__setattr__(self, "_task", task)
        object.__setattr__(self, "_overrides", overrides)
        object.__setattr__(self, "operator_class", task_class(task))
        object.__setattr__(self, "crashsafe_inside_execute", True)

    def __getattr__(self, name: str) -> Any:
        overrides = object.__getattribute__(self, "_overrides")
        if name in overrides:
            return overrides[name]
        return getattr(object.__getattribute__(self, "_task"), name)


def own_execute(task: Any) -> Callable[..., Any] | None:
    """The user's own ``execute`` of the task's class, None when it is the library's (or an overlay)."""
    if safe_attr(task, "crashsafe_inside_execute", False) or safe_attr(task, "partial_kwargs") is not None:
        return None
    cls = task_class(task)
    for klass in cls.__mro__:
        if "execute" in vars(klass):
            module = klass.__module__ or ""
            if family_of_module(module) == "user" and not module.startswith("airflow_crashsafe"):
                return vars(klass)["execute"]
            return None
    return None


def judge_own_execute(task: Any, dag: Any, parent: Rule | None) -> Finding | None:
    """The finding of the task's own ``execute`` (``parent`` judges ``super().execute``), None without one."""
    execute = own_execute(task)
    if execute is None:
        return None
    renderer = Renderer(dag, task) if dag is not None else None

    def on_super(scope: Scope, node: ast.Call) -> list[Finding]:
        if parent is None:
            return [
                Finding(
                    "unknown",
                    "unknown_operator",
                    [Reason(f"super().execute() of {task_class(task).__name__}: no rule knows its parent")],
                    "replay_safe(task, reason=...) if it is harmless to repeat",
                )
            ]
        return [parent(Overlay(task, scope.self_fields()))]

    findings = analyze_callable(
        execute,
        markers=MARKERS,
        bound=task,
        render=renderer.render if renderer is not None else None,
        on_super=on_super,
    )
    return combine(findings)


def judge_custom(task: Any, dag: Any, arg: Callable[[Any, str], Any], names: list[str]) -> Finding:
    """An operator no kind-rule took: the team's own by its ``execute``, a provider's by its arguments.

    ``arg(task, name)`` reads an argument (a mapped task's too); ``names``: the class's MRO names.
    """
    cls = task_class(task)

    def known(t: Any) -> Finding:
        renderer = Renderer(dag, t) if dag is not None else None

        def get(name: str) -> Any:
            value = arg(t, name)
            return renderer.render(value) if renderer is not None and value is not None else value

        found = classify_known(names, get, markers=MARKERS)
        return found if found is not None else unknown_operator(cls)

    own = judge_own_execute(task, dag, known)
    if own is not None:
        return own
    if family_of_module(cls.__module__ or "") != "user" or _library_execute(cls):
        return known(task)
    execute: Any = getattr(cls, "execute", None)
    if not callable(execute):
        return unknown_operator(cls)
    return combine(analyze_callable(execute, markers=MARKERS, bound=task))


def unknown_operator(cls: type) -> Finding:
    return Finding(
        "unknown",
        "unknown_operator",
        [Reason(f"no rule knows {cls.__name__} ({cls.__module__})")],
        "replay_safe(task, reason=...) if it is harmless to repeat",
    )


def _library_execute(cls: type) -> bool:
    """True when the class's ``execute`` comes from an installed library (a subclass that only configures)."""
    owner = next((k for k in cls.__mro__ if "execute" in vars(k)), None)
    return owner is not None and family_of_module(owner.__module__ or "") != "user"
