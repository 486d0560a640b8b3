"""Refuse values no database can take as given, before any connection opens.

PostgreSQL text cannot hold a NUL character, and the driver's error ("text fields cannot contain
NUL bytes", or a syntax error where a NUL cut the statement short) names neither the value nor
the task; a ``bytes`` partition value is bound as
``bytea`` and fails as "operator does not exist: text = bytea" (or, on SQLite, silently matches
nothing). Each becomes one :class:`~airflow_crashsafe.errors.ConfigurationError` naming the value
and the fix. ``bytes`` parameters stay allowed: they are how a ``bytea`` column is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql.plans import Params

__all__ = ["check_parameters", "check_partition", "check_sql"]

_BINARY = (bytes, bytearray, memoryview)


def _has_nul(value: Any) -> bool:
    """A NUL in ``value`` or in any text inside it (lists, tuples and dicts of values)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_has_nul(v) for v in value.values())
    if isinstance(value, Sequence) and not isinstance(value, _BINARY):
        return any(_has_nul(v) for v in value)
    return False


def _nul_error(what: str, task_id: str) -> ConfigurationError:
    return ConfigurationError(
        f"The {what} of {task_id!r} contains a NUL byte (\\x00), which database text cannot hold: "
        "remove it (or replace it) before passing the value."
    )


def check_parameters(parameters: Params, task_id: str) -> None:
    """Refuse a parameter whose text holds a NUL byte."""
    if parameters is None or isinstance(parameters, (str, *_BINARY)):
        return
    if isinstance(parameters, Mapping):
        named = [(f"parameter {str(k)!r}", v) for k, v in parameters.items()]
    else:
        named = [(f"parameter {i}", v) for i, v in enumerate(parameters, start=1)]
    for what, value in named:
        if _has_nul(value):
            raise _nul_error(what, task_id)


def check_partition(partition: Mapping[str, Any], task_id: str) -> None:
    """Refuse a partition value holding a NUL byte, or given as bytes."""
    for column, value in partition.items():
        what = f"partition value of {column!r}"
        if isinstance(value, _BINARY):
            raise ConfigurationError(
                f"The {what} of {task_id!r} is bytes: give text (e.g. value.decode()) or a number, "
                "as the partition column holds."
            )
        if _has_nul(value):
            raise _nul_error(what, task_id)


def check_sql(sql: str | list[str], task_id: str) -> None:
    """Refuse SQL text holding a NUL byte (the server would read the statement only up to it)."""
    statements = [sql] if isinstance(sql, str) else list(sql or ())
    for i, statement in enumerate(statements, start=1):
        if isinstance(statement, str) and "\x00" in statement:
            what = "SQL" if isinstance(sql, str) else f"SQL statement {i}"
            raise _nul_error(what, task_id)
