"""The stand-in a task of a file that did not import is judged through: what the rules read, from the tree.

:func:`~airflow_crashsafe.scan.rules.classify_task` reads a task object and its DAG. A
:class:`StaticTask` offers what it reads — ``operator_class`` (the installed class, a mirror or a
stand-in, :mod:`.static_classes`), ``task_id``, the arguments the call passed (with the DAG's
``default_args`` under them), ``partial_kwargs`` / ``expand_input`` for a mapped task,
``template_ext``, ``params`` — and its DAG is a real Airflow ``DAG`` made from the arguments that
shape templates (``template_searchpath``, ``params``, ``user_defined_macros``), so templates and
``.sql`` files render exactly as for an imported file.

An argument the syntax tree does not give (a call's result, a Variable) raises
:class:`NotStatic` when a rule reads it, and ``classify_task`` turns that into ``unknown``: a
value the scan did not see is never read as its default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath
from types import SimpleNamespace
from typing import Any

from airflow_crashsafe.scan.static_classes import ClassInfo
from airflow_crashsafe.scan.static_values import Unresolved, has_unresolved

__all__ = ["NotStatic", "StaticArgs", "StaticTask", "template_dag"]

_VALID_ID = re.compile(r"[^\w.-]")


def _describe(value: Any) -> str:
    if isinstance(value, Unresolved):
        return value.text
    found = _first_unresolved(value)
    return found.text if found is not None else repr(value)[:80]


def _first_unresolved(value: Any, depth: int = 0) -> Unresolved | None:
    if isinstance(value, Unresolved):
        return value
    if depth > 8:
        return None
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, list | tuple) else []
    for item in items:
        found = _first_unresolved(item, depth + 1)
        if found is not None:
            return found
    return None


class NotStatic(Exception):
    """A rule read an argument the syntax tree does not give: the task is ``unknown``."""

    def __init__(self, name: str, value: Any) -> None:
        super().__init__(
            f"{name}={_describe(value)} is only known when the file runs; the syntax tree does not give it"
        )


class StaticArgs(dict[str, Any]):
    """Arguments read from a call: reading one whose value is not known raises :class:`NotStatic`."""

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if has_unresolved(value):
            raise NotStatic(str(key), value)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            return default
        return self[key]

    def values(self) -> Any:
        return [self[k] for k in self]

    def items(self) -> Any:
        return [(k, self[k]) for k in self]


class StaticTask:
    """A task as its call in the syntax tree describes it (see the module docstring)."""

    def __init__(
        self,
        *,
        task_id: str,
        info: ClassInfo,
        arguments: Mapping[str, Any],
        dag: Any,
        open_arguments: str = "",
        mapped: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
        replay_safe: tuple[bool, Any] = (False, None),
    ) -> None:
        cls = info.cls
        args = StaticArgs(arguments)
        self.__dict__.update(
            task_id=task_id,
            operator_class=cls,
            class_info=info,
            dag=dag,
            template_ext=tuple(getattr(cls, "template_ext", ()) or ()),
            params=_params(arguments),
            partial_kwargs=StaticArgs(mapped[0]) if mapped else None,
            expand_input=SimpleNamespace(value=StaticArgs(mapped[1])) if mapped else None,
            crashsafe_protected_by=None,
            crashsafe_replay_safe=replay_safe[0],
            crashsafe_replay_safe_reason=replay_safe[1] if isinstance(replay_safe[1], str) else "",
            _arguments=args,
            _open=open_arguments,
        )

    def __getattr__(self, name: str) -> Any:
        args = self.__dict__.get("_arguments", {})
        if name in args:
            return args[name]
        if name.startswith("__") or name.endswith("conn_id") or not self.__dict__.get("_open"):
            raise AttributeError(name)
        raise NotStatic(name, Unresolved(self.__dict__["_open"]))

    def __repr__(self) -> str:
        return f"<StaticTask {self.__dict__.get('task_id')} {self.__dict__.get('operator_class')}>"


def _params(arguments: Mapping[str, Any]) -> dict[str, Any]:
    params = arguments.get("params")
    return dict(params) if isinstance(params, Mapping) else {}


def template_dag(dag_id: str, fileloc: str, arguments: Mapping[str, Any]) -> Any:
    """A real Airflow DAG with the arguments that shape templates, for rendering a task's fields.

    Only what the syntax tree gives is passed; nothing of the DAG file runs.
    """
    from airflow.sdk import DAG

    kwargs: dict[str, Any] = {}
    search = arguments.get("template_searchpath")
    if isinstance(search, str | PurePath):
        kwargs["template_searchpath"] = [str(search)]
    elif isinstance(search, list | tuple) and all(isinstance(p, str | PurePath) for p in search):
        kwargs["template_searchpath"] = [str(p) for p in search]
    for name in ("params", "user_defined_macros", "user_defined_filters"):
        value = arguments.get(name)
        if isinstance(value, Mapping):
            kwargs[name] = {k: v for k, v in value.items() if not has_unresolved(v)}
    if isinstance(arguments.get("render_template_as_native_obj"), bool):
        kwargs["render_template_as_native_obj"] = arguments["render_template_as_native_obj"]
    safe_id = _VALID_ID.sub("_", dag_id)[:250] or "static_dag"
    try:
        dag = DAG(dag_id=safe_id, schedule=None, **kwargs)
    except Exception:  # an argument of an odd type: templates still render, without it
        dag = DAG(dag_id=safe_id, schedule=None)
    dag.fileloc = fileloc
    return dag
