"""The two ways to read a watched DAG's runs: Airflow 3's REST API, or its metadata DB.

Both read the same facts (see :class:`~airflow_crashsafe.watchdog.runs.RunFetcher`), and neither
needs the scheduler: the api-server and the DB answer while it is dead.

* REST: a DAG's runs and task instances come from the batch reads ``POST
  /api/v2/dags/~/dagRuns/list`` and ``POST /api/v2/dags/~/dagRuns/~/taskInstances/list``
  (``dag_ids``, ``dag_run_ids``), whose ``page_limit`` the server does not clamp to ``[api]
  maximum_page_limit``, and which — unlike a GET naming the DAG — do not load the serialized DAG
  on every request (hundreds of milliseconds for a 1,000-task DAG); the runs of every watched DAG
  come in one read (:meth:`ApiRunFetcher.runs_of`). Dependencies come from
  ``.../tasks`` (``downstream_task_ids``), durations from the successful task instances, newest
  first. Between full reads of a running run, only what can change its forecast is read:

  1. ``GET /api/v2/dags/~/dagRuns/~/taskInstances?updated_at_gte=&state=<every state but
     running>`` (``dag_id_prefix_pattern``, then filtered to the DAG): those that finished, failed,
     were cleared or queued. Running ones are left out because their heartbeat touches
     ``updated_at`` every few seconds: 1,000 running tasks would be 1,000 "changes" each poll;
  2. the batch read of the running ones that started since (a first start, or a retry);
  3. the batch read of the running ones last seen waiting (queued, scheduled, …): a task resuming
     from a deferral keeps its old ``start_date``, so (2) would miss it.

  When (1) has more than one page, the runs are read in full instead. Each read covers every
  running run of the DAG at once. Without the batch reads (``post_json`` not given), GET lists
  paged as large as the server allows. Airflow's own deadlines come from the UI's API,
  ``/ui/dags/~/dagRuns/~/deadlines`` (not in the public REST API of 3.3.2, so it may change with
  Airflow), and each run's ``run_after`` from ``.../dagRuns/{run_id}``. Airflow 3.2's route answers one
  named run only (``~`` is a 404 there, and its rows name no run): there the runs that can still
  page — queued, running, and failed since ``since`` — are listed with ``/api/v2/dags/~/dagRuns``
  and each one's deadlines read, one request per such run and poll.
* DB: ``dag_run``, ``task_instance``, the newest ``serialized_dag`` row, and ``deadline`` joined to
  ``dag_run`` and ``deadline_alert``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from airflow_crashsafe.watchdog.api import NotFound
from airflow_crashsafe.watchdog.forecast import TaskProgress
from airflow_crashsafe.watchdog.health import parse_timestamp
from airflow_crashsafe.watchdog.runs import AirflowDeadline, RunView, graph_from_serialized, graph_from_tasks

__all__ = ["LIMIT", "ApiRunFetcher", "DbRunFetcher"]

#: Items asked for per page; Airflow clamps it to ``[api] maximum_page_limit`` (100 by default:
#: raise it to read a 1,000-task run in one request).
LIMIT = 1000
#: At most this many pages of history per DAG and refresh.
MAX_HISTORY_PAGES = 100


def _run(run_id: Any, run_type: Any, state: Any, run_after: Any, start: Any, end: Any) -> RunView:
    after = parse_timestamp(run_after)
    if after is None:
        raise ValueError(f"run {run_id} has no run_after")
    return RunView(
        str(run_id), str(run_type), str(state), after, parse_timestamp(start), parse_timestamp(end)
    )


def _rest_run(r: Mapping[str, Any]) -> RunView:
    return _run(
        r["dag_run_id"], r["run_type"], r["state"], r["run_after"], r.get("start_date"), r.get("end_date")
    )


def _keep(found: dict[str, list[float]], task_id: str, duration: Any, per_task: int) -> None:
    if duration is not None and len(found.setdefault(task_id, [])) < per_task:
        found[task_id].append(float(duration))


def _progress(t: dict[str, Any]) -> TaskProgress:
    return TaskProgress(
        str(t["task_id"]), t.get("state"), parse_timestamp(t.get("start_date")), t.get("map_index", -1)
    )


Json = Callable[[str, dict[str, Any]], dict[str, Any]]


def _paged(read: Callable[[int], dict[str, Any]], key: str, max_pages: int) -> Iterator[Any]:
    """Every item of the list ``key`` that ``read(offset)`` answers page by page."""
    offset = 0
    for _ in range(max_pages):
        body = read(offset)
        page = list(body.get(key, []))
        yield from page
        offset += len(page)
        total = body.get("total_entries")
        if not page or (total is not None and offset >= total):
            return


#: The batch read of task instances (Airflow 3.3's ``get_task_instances_batch``).
TI_BATCH_PATH = "/api/v2/dags/~/dagRuns/~/taskInstances/list"
#: The batch read of DAG runs (``get_list_dag_runs_batch``).
RUNS_BATCH_PATH = "/api/v2/dags/~/dagRuns/list"
#: Task instances of every DAG and run (a GET naming no DAG loads no serialized DAG).
TI_ALL_PATH = "/api/v2/dags/~/dagRuns/~/taskInstances"
#: Every task instance state but ``running`` (``none``: not scheduled yet).
NOT_RUNNING = (
    "none",
    "removed",
    "scheduled",
    "queued",
    "success",
    "restarting",
    "failed",
    "up_for_retry",
    "up_for_reschedule",
    "upstream_failed",
    "skipped",
    "deferred",
)


class ApiRunFetcher:
    """Reads through ``get_json(path, params)`` and ``post_json(path, body)`` (:class:`ApiSource`'s,
    authenticated). Without ``post_json``, task instances are read with paged GETs only."""

    def __init__(self, get_json: Json, post_json: Json | None = None) -> None:
        self.get_json, self.post_json = get_json, post_json

    def _pages(self, path: str, key: str, params: dict[str, Any], max_pages: int = 1000) -> Iterator[Any]:
        """Every item of a paged list. Asks for ``LIMIT`` a page; the server may clamp it lower."""
        return _paged(
            lambda at: self.get_json(path, {**params, "limit": LIMIT, "offset": at}), key, max_pages
        )

    def _posted(self, path: str, key: str, query: dict[str, Any], max_pages: int = 1000) -> Iterator[Any]:
        """Every item of a batch read, :data:`LIMIT` a request (batch reads are not clamped)."""
        post = self.post_json
        assert post is not None
        return _paged(
            lambda at: post(path, {**query, "page_limit": LIMIT, "page_offset": at}), key, max_pages
        )

    def runs(self, dag_id: str, since: datetime) -> list[RunView]:
        if self.post_json is not None:
            return self.runs_of({dag_id: since})[dag_id]
        path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns"
        params = {"run_after_gte": since.isoformat(), "order_by": "-run_after"}
        return [_rest_run(r) for r in self._pages(path, "dag_runs", params, max_pages=5)]

    def runs_of(self, wanted: Mapping[str, datetime]) -> dict[str, list[RunView]]:
        """The runs of every DAG in ``wanted`` (DAG id -> oldest ``run_after``) in one batch read."""
        if self.post_json is None:
            return {dag_id: self.runs(dag_id, since) for dag_id, since in wanted.items()}
        found: dict[str, list[RunView]] = {dag_id: [] for dag_id in wanted}
        query = {"dag_ids": sorted(wanted), "run_after_gte": min(wanted.values()).isoformat()}
        for r in self._posted(
            RUNS_BATCH_PATH, "dag_runs", {**query, "order_by": "-run_after"}, 5 * len(wanted)
        ):
            run = _rest_run(r)
            dag_id = str(r.get("dag_id"))
            if dag_id in found and run.run_after >= wanted[dag_id]:
                found[dag_id].append(run)
        return found

    def task_instances(
        self,
        dag_id: str,
        run_ids: Sequence[str],
        updated_since: datetime | None = None,
        waiting: Collection[str] = (),
    ) -> dict[str, list[TaskProgress]]:
        found: dict[str, list[TaskProgress]] = {run_id: [] for run_id in run_ids}
        if not run_ids:
            return found
        dag = quote(dag_id, safe="")
        if self.post_json is None:  # paged GETs, one run at a time
            params = {"updated_at_gte": updated_since.isoformat()} if updated_since else {}
            for run_id in run_ids:
                path = f"/api/v2/dags/{dag}/dagRuns/{quote(run_id, safe='')}/taskInstances"
                found[run_id] = [_progress(t) for t in self._pages(path, "task_instances", params)]
            return found
        query = {"dag_ids": [dag_id], "dag_run_ids": list(run_ids)}
        items = self._changes(dag_id, query, updated_since, waiting) if updated_since else None
        if items is None:
            items = list(self._posted(TI_BATCH_PATH, "task_instances", {**query, "order_by": "id"}))
        for t in items:
            run_id = str(t.get("dag_run_id"))
            if run_id in found and t.get("dag_id", dag_id) == dag_id:
                found[run_id].append(_progress(t))
        return found

    def _changes(
        self, dag_id: str, query: dict[str, Any], since: datetime, waiting: Collection[str]
    ) -> list[Any] | None:
        """What changed a forecast since ``since`` (see the module docstring); None: read all."""
        params = {"dag_id_prefix_pattern": dag_id, "updated_at_gte": since.isoformat(), "state": NOT_RUNNING}
        body = self.get_json(TI_ALL_PATH, {**params, "limit": LIMIT, "offset": 0})
        items = list(body.get("task_instances", []))
        total = body.get("total_entries")
        if total is not None and len(items) < int(total):
            return None  # more than a page: the batch read of everything instead of the other pages
        running = {**query, "state": ["running"]}
        items += self._posted(
            TI_BATCH_PATH, "task_instances", {**running, "start_date_gte": since.isoformat()}
        )
        if waiting:
            items += self._posted(TI_BATCH_PATH, "task_instances", {**running, "task_ids": sorted(waiting)})
        return items

    def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]:
        return graph_from_tasks(self.get_json(f"/api/v2/dags/{quote(dag_id, safe='')}/tasks", {})["tasks"])

    def durations(
        self, dag_id: str, per_task: int, ended_since: datetime | None = None
    ) -> dict[str, tuple[float, ...]]:
        found: dict[str, list[float]] = {}
        since = {"end_date_gte": ended_since.isoformat()} if ended_since is not None else {}
        if self.post_json is not None:
            query = {"dag_ids": [dag_id], "state": ["success"], "order_by": "-end_date", **since}
            pages = max(1, MAX_HISTORY_PAGES * 100 // LIMIT)  # as many as 100 GET pages of 100
            tis = self._posted(TI_BATCH_PATH, "task_instances", query, max_pages=pages)
        else:
            path = f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/~/taskInstances"
            params = {"state": "success", "order_by": "-end_date", **since}
            tis = self._pages(path, "task_instances", params, max_pages=MAX_HISTORY_PAGES)
        for ti in tis:
            _keep(found, str(ti["task_id"]), ti.get("duration"), per_task)
        return {task: tuple(d) for task, d in found.items()}

    def airflow_deadlines(self, since: datetime) -> list[AirflowDeadline]:
        try:
            return self._airflow_deadlines(since)
        except NotFound:  # Airflow 3.2: the deadlines of one named run at a time
            return self._airflow_deadlines_per_run(since)

    def _airflow_deadlines_per_run(self, since: datetime) -> list[AirflowDeadline]:
        runs = "/api/v2/dags/~/dagRuns"
        going = self._pages(runs, "dag_runs", {"state": ["queued", "running"]}, max_pages=10)
        failed = self._pages(runs, "dag_runs", {"state": "failed", "end_date_gte": since.isoformat()}, 10)
        out = []
        for r in [*going, *failed]:
            dag, run, due = str(r["dag_id"]), str(r["dag_run_id"]), parse_timestamp(r["run_after"])
            path = f"/ui/dags/{quote(dag, safe='')}/dagRuns/{quote(run, safe='')}/deadlines"
            for row in self._pages(path, "deadlines", {}, max_pages=10):
                when = parse_timestamp(row["deadline_time"])
                if when is not None and due is not None and when >= since:
                    out.append(AirflowDeadline(dag, run, when, row.get("alert_name"), due))
        return out

    def _airflow_deadlines(self, since: datetime) -> list[AirflowDeadline]:
        params = {"deadline_time_gte": since.isoformat()}
        run_after: dict[tuple[str, str], datetime | None] = {}
        out = []
        for row in self._pages("/ui/dags/~/dagRuns/~/deadlines", "deadlines", params, max_pages=10):
            dag, run = str(row["dag_id"]), str(row["dag_run_id"])
            if (dag, run) not in run_after:  # one GET per run, not per deadline
                path = f"/api/v2/dags/{quote(dag, safe='')}/dagRuns/{quote(run, safe='')}"
                run_after[dag, run] = parse_timestamp(self.get_json(path, {})["run_after"])
            when, due = parse_timestamp(row["deadline_time"]), run_after[dag, run]
            if when is not None and due is not None:
                out.append(AirflowDeadline(dag, run, when, row.get("alert_name"), due))
        return out


_AIRFLOW_DEADLINES = (
    "SELECT r.dag_id, r.run_id, d.deadline_time, a.name, r.run_after FROM deadline d "
    "JOIN dag_run r ON r.id = d.dagrun_id LEFT JOIN deadline_alert a ON a.id = d.deadline_alert_id "
    "WHERE d.deadline_time >= {p} ORDER BY d.deadline_time LIMIT 1000"
)
_RUNS = (
    "SELECT run_id, run_type, state, run_after, start_date, end_date FROM dag_run "
    "WHERE dag_id = {p} AND run_after >= {p} ORDER BY run_after DESC LIMIT 500"
)
_TIS = (
    "SELECT run_id, task_id, state, start_date, map_index FROM task_instance "
    "WHERE dag_id = {p} AND run_id IN ({runs})"
)
_GRAPH = (
    "SELECT data, data_compressed FROM serialized_dag WHERE dag_id = {p} ORDER BY last_updated DESC LIMIT 1"
)
_DURATIONS = (
    "SELECT task_id, duration FROM (SELECT task_id, duration, ROW_NUMBER() OVER "
    "(PARTITION BY task_id ORDER BY end_date DESC) AS n FROM task_instance "
    "WHERE dag_id = {p} AND state = 'success' AND duration IS NOT NULL{ended}) AS recent "
    "WHERE n <= {p} ORDER BY task_id, n"
)


class DbRunFetcher:
    """Reads with ``rows(sql, params)`` on one open metadata-DB connection (``{p}``: placeholder)."""

    def __init__(self, rows: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]], dialect: str) -> None:
        self.rows, self.dialect = rows, dialect

    def _when(self, value: datetime) -> Any:
        # Airflow's UtcDateTime is naive UTC text in SQLite, timestamptz in PostgreSQL.
        if self.dialect == "sqlite":
            return value.astimezone(timezone.utc).replace(tzinfo=None).isoformat(" ")
        return value

    def runs(self, dag_id: str, since: datetime) -> list[RunView]:
        return [_run(*row) for row in self.rows(_RUNS, (dag_id, self._when(since)))]

    def task_instances(
        self,
        dag_id: str,
        run_ids: Sequence[str],
        updated_since: datetime | None = None,
        waiting: Collection[str] = (),
    ) -> dict[str, list[TaskProgress]]:
        """``waiting`` is not needed: ``updated_at`` finds every change (heartbeats cost nothing here)."""
        found: dict[str, list[TaskProgress]] = {run_id: [] for run_id in run_ids}
        if not run_ids:
            return found
        sql = _TIS.replace("{runs}", ", ".join(["{p}"] * len(run_ids)))
        params: list[Any] = [dag_id, *run_ids]
        if updated_since is not None:
            sql += " AND updated_at >= {p}"
            params.append(self._when(updated_since))
        for run, task, state, start, index in self.rows(sql, params):
            found[str(run)].append(TaskProgress(str(task), state, parse_timestamp(start), int(index)))
        return found

    def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]:
        found = self.rows(_GRAPH, (dag_id,))
        if not found:
            raise ValueError(f"DAG {dag_id!r} has no serialized_dag row: is it parsed?")
        data, compressed = found[0]
        return graph_from_serialized(data, compressed)

    def durations(
        self, dag_id: str, per_task: int, ended_since: datetime | None = None
    ) -> dict[str, tuple[float, ...]]:
        found: dict[str, list[float]] = {}
        if ended_since is None:
            sql, params = _DURATIONS.replace("{ended}", ""), [dag_id, per_task]
        else:
            sql = _DURATIONS.replace("{ended}", " AND end_date >= {p}")
            params = [dag_id, self._when(ended_since), per_task]
        for task, duration in self.rows(sql, params):
            _keep(found, str(task), duration, per_task)
        return {task: tuple(d) for task, d in found.items()}

    def airflow_deadlines(self, since: datetime) -> list[AirflowDeadline]:
        out = []
        for dag, run, at, name, after in self.rows(_AIRFLOW_DEADLINES, (self._when(since),)):
            when, due = parse_timestamp(at), parse_timestamp(after)
            if when is not None and due is not None:
                out.append(AirflowDeadline(str(dag), str(run), when, name, due))
        return out
