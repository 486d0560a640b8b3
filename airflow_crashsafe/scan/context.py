"""A sample run to render templates with, and the markers that say "this value is the run's".

The scan renders every templated field as a task would see it on 2031-07-14, a date nothing else
in a DAG file is likely to hold. A rendered value containing that date (or the run id) is
*derived from the run*: the test that decides whether a ``DELETE`` is scoped to the run's
partition and whether an idempotency key is the same in every attempt of the run. Per-attempt
values (``ti.id``, ``try_number``) deliberately do not contain it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = ["MARKERS", "SAMPLE_DS", "Renderer", "sample_context"]

SAMPLE_DS = "2031-07-14"
SAMPLE_RUN_ID = f"scheduled__{SAMPLE_DS}T00:00:00+00:00"
#: Substrings only a value of the sample run contains.
MARKERS = (SAMPLE_DS, "20310714", "2031-07-15", "20310715")
_LOGICAL = datetime(2031, 7, 14, tzinfo=timezone.utc)


class _Anything(str):
    """What ``var.value.x`` / ``conn.x.host`` render to: a placeholder that has every attribute."""

    def __getattr__(self, name: str) -> _Anything:
        return _Anything(f"{self}.{name}")

    def __getitem__(self, key: Any) -> _Anything:
        return _Anything(f"{self}[{key}]")

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return self


def _params(dag: Any, task: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for holder in (getattr(dag, "params", None), getattr(task, "params", None)):
        if not holder:
            continue
        for key in list(holder):
            try:
                out[key] = holder[key]
            except Exception:  # a Param without a default: the template still renders
                out[key] = _Anything(f"params.{key}")
    return out


@functools.cache
def _macros() -> SimpleNamespace:
    from airflow.sdk.execution_time import macros

    def idempotency_key(target: str, version: int = 1) -> str:
        return f"key-{SAMPLE_DS}-{target}-{version}"

    names = {n: getattr(macros, n) for n in dir(macros) if not n.startswith("_")}
    return SimpleNamespace(**names, crashsafe=SimpleNamespace(idempotency_key=idempotency_key))


def sample_context(dag: Any, task: Any, attempt: int = 1) -> dict[str, Any]:
    """The template context of one task in the sample run (no database, no connection).

    ``attempt`` numbers the try: what differs between two attempts of the run (``try_number``,
    the task instance's id) is what a per-attempt value is made of.
    """
    dag_id, task_id = getattr(dag, "dag_id", "dag"), getattr(task, "task_id", "task")
    ti = SimpleNamespace(
        dag_id=dag_id,
        task_id=task_id,
        run_id=SAMPLE_RUN_ID,
        try_number=attempt,
        map_index=-1,
        id=f"0197c0de-attempt-{attempt:04d}",
        hostname="worker-1",
        xcom_pull=lambda *a, **k: _Anything("xcom"),
    )
    dag_run = SimpleNamespace(
        dag_id=dag_id, run_id=SAMPLE_RUN_ID, logical_date=_LOGICAL, conf={}, run_type="scheduled"
    )
    return {
        "ds": SAMPLE_DS,
        "ds_nodash": "20310714",
        "ts": _LOGICAL.isoformat(),
        "ts_nodash": "20310714T000000",
        "ts_nodash_with_tz": "20310714T000000+0000",
        "logical_date": _LOGICAL,
        "data_interval_start": _LOGICAL,
        "data_interval_end": _LOGICAL + timedelta(days=1),
        "prev_ds": "2031-07-13",
        "next_ds": "2031-07-15",
        "yesterday_ds": "2031-07-13",
        "tomorrow_ds": "2031-07-15",
        "run_id": SAMPLE_RUN_ID,
        "dag_run": dag_run,
        "ti": ti,
        "task_instance": ti,
        "task_instance_key_str": f"{dag_id}__{task_id}__20310714",
        "params": _params(dag, task),
        "macros": _macros(),
        "var": {"value": _Anything("var"), "json": _Anything("var")},
        "conn": _Anything("conn"),
        "dag": dag,
        "task": task,
        "inlets": [],
        "outlets": [],
        "expanded_ti_count": None,
        "map_index_template": None,
    }


class Renderer:
    """Renders a task's templated values with its DAG's Jinja environment and the sample context.

    Undefined names render as empty text instead of failing, and a value naming a file with one of
    the operator's ``template_ext`` is loaded from the template search path, as Airflow does.
    """

    def __init__(self, dag: Any, task: Any, attempt: int = 1) -> None:
        self.env = _environment(dag)
        self.context = sample_context(dag, task, attempt)
        self.exts = tuple(getattr(task, "template_ext", ()) or ())
        self.search = [str(p) for p in [dag.folder, *_as_list(getattr(dag, "template_searchpath", None))]]

    def render(self, value: Any) -> Any:
        """``value`` rendered; raises what Jinja raises (the caller reports it)."""
        if isinstance(value, str):
            if self.exts and value.strip().endswith(self.exts):
                return self._file(value.strip())
            if "{{" not in value and "{%" not in value:
                return value
            return self.env.from_string(value).render(**self.context)
        if isinstance(value, Mapping):
            return {k: self.render(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.render(v) for v in value]
        return value

    def _file(self, name: str) -> str:
        try:
            return self.env.get_template(name).render(**self.context)
        except Exception:
            for root in self.search:
                path = Path(root) / name
                if path.is_file():
                    return self.env.from_string(path.read_text()).render(**self.context)
            raise


_LAST_ENV: list[tuple[Any, Any]] = []


def _environment(dag: Any) -> Any:
    """The DAG's sandboxed Jinja environment, lenient about undefined names.

    Tasks are judged DAG by DAG, so the last DAG's environment is kept (and only that one: the
    cluster policy runs in long-lived processes).
    """
    import jinja2

    if _LAST_ENV and _LAST_ENV[0][0] is dag:
        return _LAST_ENV[0][1]
    env = dag.get_template_env(force_sandboxed=True)
    env.undefined = jinja2.ChainableUndefined
    _LAST_ENV[:] = [(dag, env)]
    return env


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if isinstance(value, str | Path) else list(value)
