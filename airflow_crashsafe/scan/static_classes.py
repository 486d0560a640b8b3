"""The operator class a name in a DAG file refers to, for static analysis: real where installed.

The rules (:func:`~airflow_crashsafe.scan.rules.classify_task`) read an operator's class: the
names of its MRO, its module, its ``execute``. For a file that does not import, the scan gets the
class from the name the file imports: the installed class itself where its module imports (an
installed library, never the user's code), else its Airflow 3 home (:mod:`.airflow2`), else a
stand-in class carrying the names of its kind (a provider's ``*Sensor`` is a sensor) and marked
``__crashsafe_unresolved__`` so the rules say ``unknown`` rather than guess.

A class the user wrote is read from its syntax tree by :mod:`.static_module`; its bases that are
installed classes become *mirrors*: plain classes with the same names, modules and MRO as the
real ones, so no metaclass of Airflow's runs on a stand-in.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_crashsafe.scan.airflow2 import airflow3_home

__all__ = [
    "TASK_KINDS",
    "UNRESOLVED_ATTR",
    "ClassInfo",
    "decorated_class",
    "external_class",
    "import_class",
    "mirror",
    "stand_in",
    "unresolved_reason",
]

UNRESOLVED_ATTR = "__crashsafe_unresolved__"
_STD = "airflow.providers.standard.decorators"

#: ``@task.<kind>`` → the decorated operator class Airflow builds for it.
TASK_KINDS: dict[str, tuple[str, str]] = {
    "": (f"{_STD}.python", "_PythonDecoratedOperator"),
    "python": (f"{_STD}.python", "_PythonDecoratedOperator"),
    "bash": (f"{_STD}.bash", "_BashDecoratedOperator"),
    "virtualenv": (f"{_STD}.python_virtualenv", "_PythonVirtualenvDecoratedOperator"),
    "external_python": (f"{_STD}.external_python", "_PythonExternalDecoratedOperator"),
    "branch": (f"{_STD}.branch_python", "_BranchPythonDecoratedOperator"),
    "branch_virtualenv": (f"{_STD}.branch_virtualenv", "_BranchPythonVirtualenvDecoratedOperator"),
    "branch_external_python": (f"{_STD}.branch_external_python", "_BranchExternalPythonDecoratedOperator"),
    "short_circuit": (f"{_STD}.short_circuit", "_ShortCircuitDecoratedOperator"),
    "sensor": (f"{_STD}.sensor", "DecoratedSensorOperator"),
    "docker": ("airflow.providers.docker.decorators.docker", "_DockerDecoratedOperator"),
    "kubernetes": ("airflow.providers.cncf.kubernetes.decorators.kubernetes", "_KubernetesDecoratedOperator"),
    "sql": ("airflow.providers.common.sql.decorators.sql", "_SQLDecoratedOperator"),
}


@dataclass
class ClassInfo:
    """What a name resolved to: the class the rules read, and how it was found."""

    cls: type
    written: str
    #: The Airflow 3 class it is read as, when that is not the class written (``PostgresOperator``).
    read_as: str = ""
    #: Argument names that changed on the way (``postgres_conn_id`` → ``conn_id``).
    arguments: dict[str, str] = field(default_factory=dict)
    note: str = ""


@functools.cache
def import_class(module: str, name: str) -> type | None:
    """``module.name`` if it imports and is a class (deprecation warnings of old paths kept quiet)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = getattr(importlib.import_module(module), name, None)
    except Exception:  # not installed, or its import fails here: the caller falls back
        return None
    return found if isinstance(found, type) else None


@functools.cache
def mirror(real: type) -> type:
    """A plain class with ``real``'s name, module and MRO names (cached, so shared bases stay one)."""
    bases = tuple(mirror(b) for b in real.__bases__ if b is not object)
    namespace = {"__module__": real.__module__, "__qualname__": real.__qualname__}
    try:
        return type(real.__name__, bases, namespace)
    except TypeError:  # an MRO the mirrors cannot reproduce: keep the first line of ancestry
        return type(real.__name__, bases[:1], namespace)


def _base(module: str, name: str, fallback: tuple[str, ...]) -> type:
    real = import_class(module, name)
    if real is not None:
        return mirror(real)
    cls: type = object
    for part in reversed(fallback):
        cls = type(part, (cls,) if cls is not object else (), {"__module__": module})
    return cls


def stand_in(name: str, module: str, why: str, *, base: type | None = None) -> type:
    """A class named ``name`` standing in for one the scan cannot load, marked unresolved."""
    operator = base or _base("airflow.sdk.bases.operator", "BaseOperator", ("BaseOperator",))
    return type(name, (operator,), {"__module__": module, "__qualname__": name, UNRESOLVED_ATTR: why})


def _sensor_base() -> type:
    return _base("airflow.sdk.bases.sensor", "BaseSensorOperator", ("BaseSensorOperator", "BaseOperator"))


def external_class(qualname: str, is_repo: Callable[[str], bool]) -> ClassInfo:
    """The class ``qualname`` (as the file imports it) names where the scan runs.

    ``is_repo`` says whether a top-level module is the user's own (never imported: the caller
    reads it from its syntax tree).
    """
    module, _, name = qualname.rpartition(".")
    if not module or is_repo(module.split(".")[0]):
        return ClassInfo(stand_in(name, module, f"{qualname} is not readable here"), qualname)
    real = import_class(module, name)
    if real is not None:
        return ClassInfo(real, qualname)
    for home in airflow3_home(module, name):
        found = import_class(home.module, home.name)
        if found is not None:
            read_as = f"{home.module}.{home.name}"
            note = f"{qualname} is not importable on Airflow 3 here; read as {read_as}"
            return ClassInfo(found, qualname, read_as if home.name != name else "", home.arguments, note)
    why = f"{qualname} is not installed where the scan runs"
    if module.startswith("airflow.") and name.endswith(("Sensor", "SensorAsync")):
        return ClassInfo(stand_in(name, module, why, base=_sensor_base()), qualname, note=why)
    return ClassInfo(stand_in(name, module, why), qualname, note=why)


def decorated_class(kind: str) -> ClassInfo:
    """The operator class ``@task.<kind>`` builds (``kind`` "" for plain ``@task``)."""
    module, name = TASK_KINDS.get(kind, ("airflow.sdk", f"@task.{kind}"))
    real = import_class(module, name)
    written = f"{module}.{name}"
    if real is not None:
        return ClassInfo(real, written)
    why = f"@task.{kind} needs a provider not installed where the scan runs"
    return ClassInfo(stand_in(name, module, why), written, note=why)


def unresolved_reason(cls: Any) -> str | None:
    """Why a stand-in class could not be loaded, or None for a class the scan knows."""
    return getattr(cls, UNRESOLVED_ATTR, None)
