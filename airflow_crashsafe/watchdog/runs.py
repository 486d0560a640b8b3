"""The DAG runs a deadline watches, read by either source, as plain values.

:class:`RunReader` asks a :class:`RunFetcher` (the REST API's or the metadata DB's, see
:mod:`airflow_crashsafe.watchdog.run_fetchers`) for each watched DAG's recent runs, the task
instances of the runs still going, the DAG's task dependencies and its tasks' recent successful
durations. Dependencies and durations change slowly, so they are cached for ``refresh`` seconds;
runs and task instances are read every poll. A DAG that cannot be read is reported with
``error`` set, never raised, so its deadlines are simply not judged that poll.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from airflow_crashsafe.watchdog.forecast import TaskProgress

__all__ = ["DagRuns", "RunFetcher", "RunReader", "RunView", "graph_from_serialized", "graph_from_tasks"]

#: Run states whose task instances are read for a forecast.
GOING = ("queued", "running")


@dataclass(frozen=True)
class RunView:
    """One DAG run: ``run_after`` is when it became due (Airflow 3 sets it on every run)."""

    run_id: str
    run_type: str
    state: str
    run_after: datetime
    start_date: datetime | None = None
    end_date: datetime | None = None
    #: The run's task instances; read only while the run is queued or running.
    tasks: tuple[TaskProgress, ...] = ()


@dataclass(frozen=True)
class DagRuns:
    """What one poll learned about one watched DAG."""

    dag_id: str
    runs: tuple[RunView, ...] = ()
    downstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    durations: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    error: str | None = None


class RunFetcher(Protocol):
    """One source's reads (see :mod:`airflow_crashsafe.watchdog.run_fetchers`)."""

    def runs(self, dag_id: str, since: datetime) -> list[RunView]: ...

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskProgress]: ...

    def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]: ...

    def durations(self, dag_id: str, per_task: int) -> dict[str, tuple[float, ...]]: ...


def graph_from_tasks(tasks: Any) -> dict[str, tuple[str, ...]]:
    """Task id → downstream ids, from ``GET /api/v2/dags/{dag_id}/tasks``'s ``tasks`` list."""
    return {str(t["task_id"]): tuple(str(d) for d in t.get("downstream_task_ids") or ()) for t in tasks}


def graph_from_serialized(data: Any, compressed: bytes | None = None) -> dict[str, tuple[str, ...]]:
    """Task id → downstream ids, from a ``serialized_dag`` row (``data`` JSON or ``data_compressed``).

    Airflow stores ``{"__version": 3, "dag": {"tasks": [{"__type": ..., "__var": {task}}]}}``; a
    task's empty ``downstream_task_ids`` is left out.
    """
    if data is None and compressed is not None:
        data = zlib.decompress(bytes(compressed))
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data).decode("utf-8")
    if isinstance(data, str):
        data = json.loads(data)
    tasks = [t.get("__var", t) for t in data["dag"]["tasks"]]
    return graph_from_tasks(tasks)


@dataclass
class _Cached:
    at: datetime
    downstream: dict[str, tuple[str, ...]]
    durations: dict[str, tuple[float, ...]]
    finished: frozenset[str]


class RunReader:
    """Reads the watched DAGs each poll. ``wanted(now)`` maps each DAG id to its oldest due time."""

    def __init__(
        self,
        wanted: Callable[[datetime], Mapping[str, datetime]],
        *,
        history: int = 10,
        refresh: float = 600.0,
    ) -> None:
        self.wanted, self.history, self.refresh = wanted, history, refresh
        self._cache: dict[str, _Cached] = {}

    def read(self, fetch: RunFetcher, now: datetime) -> dict[str, DagRuns]:
        out: dict[str, DagRuns] = {}
        for dag_id, since in self.wanted(now).items():
            try:
                out[dag_id] = self._read(fetch, dag_id, since, now)
            except Exception as exc:  # any source error: that DAG is not judged this poll
                out[dag_id] = DagRuns(dag_id, error=f"{type(exc).__name__}: {exc}"[:300])
        return out

    def _read(self, fetch: RunFetcher, dag_id: str, since: datetime, now: datetime) -> DagRuns:
        runs = fetch.runs(dag_id, since)
        finished = frozenset(r.run_id for r in runs if r.state == "success")
        cached = self._cache.get(dag_id)
        stale = cached is None or (now - cached.at).total_seconds() >= self.refresh
        if cached is None or stale or not finished <= cached.finished:  # a run succeeded: new durations
            downstream = fetch.downstream(dag_id)
            cached = _Cached(now, downstream, fetch.durations(dag_id, self.history), finished)
            self._cache[dag_id] = cached
        runs = [
            replace(run, tasks=tuple(fetch.task_instances(dag_id, run.run_id))) if run.state in GOING else run
            for run in runs
        ]
        return DagRuns(dag_id, tuple(runs), cached.downstream, cached.durations)
