"""Slots and attempts: what must take effect once, and who is trying (docs/design.md, "Slot", "Attempt").

Both are read from a task's context only through ``context["ti"]`` and ``context["dag_run"]``, so
any plain mapping of objects with those attributes drives them: tests and benchmarks do exactly that.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "Attempt",
    "Slot",
    "attempt_from_context",
    "current_context",
    "slot_from_context",
    "worker_hostname",
]


@functools.cache
def worker_hostname() -> str:
    """The hostname Airflow records for this worker (``[core] hostname_callable``).

    Attempts, ledger rows and the audit's liveness beacons all carry this one name, so a record
    of one can be matched with the others' (another host's liveness is read from its beacons).
    """
    try:
        from airflow.sdk.api.client import get_hostname

        return str(get_hostname())
    except Exception:  # outside a worker, or a broken callable: the plain FQDN is Airflow's default
        return socket.getfqdn()


@dataclass(frozen=True)
class Slot:
    """The unit that must take effect once: ``(dag_id, task_id, map_index, partition)``.

    ``partition`` is the run's logical date (ISO 8601, UTC) when it has one, so a backfill or a
    manual re-run of the same date lands in the same slot; otherwise the ``run_id``.
    """

    dag_id: str
    task_id: str
    map_index: int
    partition: str

    def describe(self) -> str:
        """A short human-readable name, for logs and error messages."""
        mapped = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return f"{self.dag_id}.{self.task_id}{mapped} @ {self.partition}"


@dataclass(frozen=True)
class Attempt:
    """One execution of a slot. Fencing orders attempts by ``(try_number, issue order)``."""

    try_number: int
    ti_id: str
    run_id: str
    clear_number: int
    hostname: str = field(default_factory=worker_hostname)
    pid: int = field(default_factory=os.getpid)
    started_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def describe(self) -> str:
        """Who this attempt is, in one line: try, host, pid, ti id."""
        return f"try {self.try_number} (ti {self.ti_id}, {self.hostname} pid {self.pid})"


def current_context(context: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """Return ``context`` or, inside a running task, Airflow's current one."""
    if context is not None:
        return context
    from airflow.sdk import get_current_context  # only inside a task; keeps imports light

    try:
        return get_current_context()
    except Exception as exc:  # Airflow raises a plain exception outside a task
        raise ConfigurationError(
            "No task context: call this inside a running Airflow task, or pass context= explicitly "
            "(a mapping with 'ti' and 'dag_run')."
        ) from exc


def _require(context: Mapping[str, Any], key: str) -> Any:
    try:
        return context[key]
    except KeyError:
        raise ConfigurationError(
            f"The task context has no {key!r}; crashsafe needs context['ti'] and "
            "context['dag_run'] to know which slot and attempt this is."
        ) from None


def _iso_utc(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat()


def slot_from_context(context: Mapping[str, Any], partition: str | None = None) -> Slot:
    """The slot a task's context belongs to; ``partition`` overrides the derived one."""
    ti = _require(context, "ti")
    dag_run = _require(context, "dag_run")
    if partition is None or str(partition) == "":
        logical_date = getattr(dag_run, "logical_date", None)
        partition = _iso_utc(logical_date) if logical_date is not None else str(ti.run_id)
    map_index = getattr(ti, "map_index", -1)
    return Slot(
        dag_id=str(ti.dag_id),
        task_id=str(ti.task_id),
        map_index=-1 if map_index is None else int(map_index),
        partition=str(partition),
    )


def attempt_from_context(context: Mapping[str, Any]) -> Attempt:
    """The attempt a task's context describes."""
    ti = _require(context, "ti")
    dag_run = _require(context, "dag_run")
    return Attempt(
        try_number=int(ti.try_number),
        ti_id=str(ti.id),
        run_id=str(getattr(dag_run, "run_id", None) or ti.run_id),
        clear_number=int(getattr(dag_run, "clear_number", 0) or 0),
    )
