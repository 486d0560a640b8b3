"""The DAG runs a deadline watches, read by either source, as plain values.

:class:`RunReader` asks a :class:`RunFetcher` (the REST API's or the metadata DB's, see
:mod:`airflow_crashsafe.watchdog.run_fetchers`) for each watched DAG's recent runs, the task
instances of the runs still going, the DAG's task dependencies and its tasks' recent successful
durations; with ``airflow_deadlines`` also the ``deadline`` rows Airflow's own ``DeadlineAlert``
definitions created for runs (one per run and alert, with its ``deadline_time``), whose DAGs are
then read too. Dependencies and durations change slowly, so they are cached for ``refresh``
seconds; runs are read every poll, and a running run's task instances in full once per
``refresh``, else only those updated since the previous poll (``updated_at``, with a minute's
overlap for clock differences). A fetcher with ``runs_of`` reads every watched DAG's runs at once.
Durations are read in full once, then only the successes that ended since the previous read. A DAG
that cannot be read is reported with ``error`` set, never raised, so its deadlines are simply not
judged that poll.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from airflow_crashsafe.watchdog.forecast import DONE_STATES, STARTED_STATES, TaskProgress

__all__ = [
    "AirflowDeadline",
    "DagRuns",
    "RunFetcher",
    "RunReader",
    "RunView",
    "graph_from_serialized",
    "graph_from_tasks",
]

#: Run states whose task instances are read for a forecast.
GOING = ("queued", "running")
#: Task instances are re-read from this many seconds before the previous read (clock skew).
TI_OVERLAP = 60.0


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
class AirflowDeadline:
    """One ``deadline`` row of Airflow's own DeadlineAlerts: this run must be done by ``at``."""

    dag_id: str
    run_id: str
    at: datetime
    name: str | None
    run_after: datetime


@dataclass(frozen=True)
class DagRuns:
    """What one poll learned about one watched DAG."""

    dag_id: str
    runs: tuple[RunView, ...] = ()
    downstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    durations: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    error: str | None = None
    #: Airflow's own deadlines on this DAG's runs; None when not read (not asked for, or failed).
    airflow_deadlines: tuple[AirflowDeadline, ...] | None = None
    #: Why dependencies, durations or task instances could not be read (runs were).
    forecast_error: str | None = None


class RunFetcher(Protocol):
    """One source's reads (see :mod:`airflow_crashsafe.watchdog.run_fetchers`)."""

    def runs(self, dag_id: str, since: datetime) -> list[RunView]: ...

    def task_instances(
        self,
        dag_id: str,
        run_ids: Sequence[str],
        updated_since: datetime | None = None,
        waiting: Collection[str] = (),
    ) -> dict[str, list[TaskProgress]]:
        """The task instances of the DAG's runs ``run_ids`` (each one a key), in as few reads as
        the source allows; with ``updated_since`` at least those whose state or start changed
        since. ``waiting``: the tasks last seen neither started nor done (the REST source asks
        which of them run now)."""
        ...

    def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]: ...

    def durations(
        self, dag_id: str, per_task: int, ended_since: datetime | None = None
    ) -> dict[str, tuple[float, ...]]: ...

    def airflow_deadlines(self, since: datetime) -> list[AirflowDeadline]: ...


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
        airflow_deadlines: bool = False,
        keep: float = 86400.0,
    ) -> None:
        self.wanted, self.history, self.refresh = wanted, history, refresh
        self.airflow_deadlines, self.keep = airflow_deadlines, keep
        #: Why Airflow's own deadlines could not be read at the last poll, if they could not.
        self.airflow_error: str | None = None
        self._cache: dict[str, _Cached] = {}
        self._tis: dict[tuple[str, str], tuple[datetime, dict[tuple[str, int], TaskProgress]]] = {}

    def read(self, fetch: RunFetcher, now: datetime) -> dict[str, DagRuns]:
        wanted = dict(self.wanted(now))
        theirs: dict[str, list[AirflowDeadline]] | None = None
        if self.airflow_deadlines:
            try:
                theirs = {}
                for row in fetch.airflow_deadlines(now - timedelta(seconds=self.keep)):
                    theirs.setdefault(row.dag_id, []).append(row)
                    since = wanted.get(row.dag_id)
                    wanted[row.dag_id] = min(since, row.run_after) if since else row.run_after
                self.airflow_error = None
            except Exception as exc:
                theirs = None
                self.airflow_error = f"Airflow's deadlines unreadable: {type(exc).__name__}: {exc}"[:300]
        out: dict[str, DagRuns] = {}
        batch = getattr(fetch, "runs_of", None)  # optional: every DAG's runs in one read
        runs: dict[str, list[RunView]] | Exception | None = None
        if batch is not None and len(wanted) > 1:
            try:
                runs = batch(wanted)
            except Exception as exc:  # no DAG is judged this poll, as when the server is down
                runs = exc
        for dag_id, since in wanted.items():
            try:
                if isinstance(runs, Exception):
                    raise runs
                view = self._read(fetch, dag_id, since, now, runs.get(dag_id) if runs is not None else None)
                if theirs is not None:
                    view = replace(view, airflow_deadlines=tuple(theirs.get(dag_id, ())))
                out[dag_id] = view
            except Exception as exc:  # any source error: that DAG is not judged this poll
                out[dag_id] = DagRuns(dag_id, error=f"{type(exc).__name__}: {exc}"[:300])
        return out

    def _read(
        self, fetch: RunFetcher, dag_id: str, since: datetime, now: datetime, runs: list[RunView] | None
    ) -> DagRuns:
        runs = fetch.runs(dag_id, since) if runs is None else runs
        try:
            return self._progress(fetch, dag_id, runs, now)
        except Exception as exc:  # no forecast this poll; the runs alone still decide "missed"
            why = f"forecast unavailable: {type(exc).__name__}: {exc}"[:300]
            return DagRuns(dag_id, tuple(runs), forecast_error=why)

    def _progress(self, fetch: RunFetcher, dag_id: str, runs: list[RunView], now: datetime) -> DagRuns:
        """The runs with the going ones' task instances, the dependencies and the durations."""
        finished = frozenset(r.run_id for r in runs if r.state == "success")
        cached = self._cache.get(dag_id)
        stale = cached is None or (now - cached.at).total_seconds() >= self.refresh
        if cached is None or stale or not finished <= cached.finished:  # a run succeeded: new durations
            durations = fetch.durations(dag_id, self.history, cached.at if cached else None)
            if cached is not None:  # newer first, then what was known, the newest ``history`` of them
                durations = {
                    task: (*durations.get(task, ()), *cached.durations.get(task, ()))[: self.history]
                    for task in {*durations, *cached.durations}
                }
            cached = _Cached(now, fetch.downstream(dag_id), durations, finished)
            self._cache[dag_id] = cached
            self._tis = {key: v for key, v in self._tis.items() if key[0] != dag_id}  # re-read in full
        going = self._task_instances(fetch, dag_id, [r.run_id for r in runs if r.state in GOING], now)
        self._tis = {key: v for key, v in self._tis.items() if key[0] != dag_id or key[1] in going}
        runs = [replace(run, tasks=going[run.run_id]) if run.run_id in going else run for run in runs]
        return DagRuns(dag_id, tuple(runs), cached.downstream, cached.durations)

    def _task_instances(
        self, fetch: RunFetcher, dag_id: str, run_ids: list[str], now: datetime
    ) -> dict[str, tuple[TaskProgress, ...]]:
        """The runs' task instances: a run seen first in full, the others only those updated since
        the oldest previous read (with a margin); one read of each kind for all the DAG's runs."""
        known = {r: self._tis[dag_id, r] for r in run_ids if (dag_id, r) in self._tis}
        tis = {r: dict(known[r][1]) if r in known else {} for r in run_ids}
        fresh = [r for r in run_ids if r not in known]
        reads: list[tuple[list[str], datetime | None]] = [(fresh, None)] if fresh else []
        if known:
            oldest = min(at for at, _ in known.values()) - timedelta(seconds=TI_OVERLAP)
            reads.append((list(known), oldest))
        waiting = {
            ti.task_id
            for _, seen in known.values()
            for ti in seen.values()
            if ti.state not in DONE_STATES and ti.state not in STARTED_STATES
        }
        for ids, since in reads:
            for run_id, found in fetch.task_instances(dag_id, ids, since, waiting if since else ()).items():
                for ti in found:
                    tis.setdefault(run_id, {})[ti.task_id, ti.map_index] = ti
        for run_id in run_ids:
            self._tis[dag_id, run_id] = (now, tis[run_id])
        return {run_id: tuple(tis[run_id].values()) for run_id in run_ids}
