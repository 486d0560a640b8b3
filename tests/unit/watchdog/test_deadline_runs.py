"""The run reader: cached dependencies and durations, task instances read incrementally, errors per DAG."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from airflow_crashsafe.watchdog.forecast import TaskProgress
from airflow_crashsafe.watchdog.runs import AirflowDeadline, RunReader, RunView

T0 = datetime(2026, 1, 15, 3, 0, tzinfo=timezone.utc)


class Recorder:
    """A fetcher that records what it was asked and answers from ``tis`` / ``runs_state``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.tis = {"a": TaskProgress("a", "running", T0), "b": TaskProgress("b", None)}
        self.changed: set[str] = set()
        self.run_state = "running"
        self.fail_dag: str | None = None

    def runs(self, dag_id: str, since: datetime) -> list[RunView]:
        if dag_id == self.fail_dag:
            raise ValueError("GET /api/v2/dags/x/dagRuns answered HTTP 503")
        return [RunView("r1", "scheduled", self.run_state, T0 - timedelta(hours=1))]

    def task_instances(
        self, dag_id: str, run_ids: Sequence[str], updated_since: datetime | None = None
    ) -> dict[str, list[TaskProgress]]:
        self.calls.append(("tis", updated_since))
        if updated_since is None:
            return {run_id: list(self.tis.values()) for run_id in run_ids}
        return {run_id: [self.tis[t] for t in self.changed] for run_id in run_ids}

    def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]:
        self.calls.append(("graph", dag_id))
        return {"a": ("b",), "b": ()}

    def durations(
        self, dag_id: str, per_task: int, ended_since: datetime | None = None
    ) -> dict[str, tuple[float, ...]]:
        self.calls.append(("durations", ended_since))
        return {"a": (60.0,)} if ended_since is None else {"a": (90.0,), "b": (30.0,)}

    def airflow_deadlines(self, since: datetime) -> list[AirflowDeadline]:
        return [AirflowDeadline("theirs", "r1", T0 + timedelta(hours=1), "sla", T0 - timedelta(hours=1))]


def test_task_instances_are_read_in_full_then_only_changes() -> None:
    """The first poll reads every task instance; later polls only those updated since (minus a minute)."""
    fetch, reader = Recorder(), RunReader(lambda now: {"d": now - timedelta(days=1)}, refresh=600)
    reader.read(fetch, T0)
    fetch.tis["b"] = TaskProgress("b", "running", T0 + timedelta(seconds=10))
    fetch.changed = {"b"}
    view = reader.read(fetch, T0 + timedelta(seconds=10))["d"]
    assert [c for c in fetch.calls if c[0] == "tis"] == [("tis", None), ("tis", T0 - timedelta(seconds=60))]
    assert {t.task_id: t.state for t in view.runs[0].tasks} == {"a": "running", "b": "running"}
    assert [c[0] for c in fetch.calls].count("graph") == 1  # dependencies and durations cached


def test_refresh_rereads_everything() -> None:
    """After ``refresh`` seconds dependencies, durations and task instances are read in full again."""
    fetch, reader = Recorder(), RunReader(lambda now: {"d": now}, refresh=60)
    reader.read(fetch, T0)
    reader.read(fetch, T0 + timedelta(seconds=61))
    assert [c for c in fetch.calls if c[0] in ("tis", "graph")] == [
        ("graph", "d"),
        ("tis", None),
        ("graph", "d"),
        ("tis", None),
    ]


def test_finished_run_needs_no_task_instances_and_refreshes_durations() -> None:
    """A run that succeeded is not read task by task, and its success re-reads the durations."""
    fetch, reader = Recorder(), RunReader(lambda now: {"d": now}, refresh=600)
    reader.read(fetch, T0)
    fetch.run_state = "success"
    view = reader.read(fetch, T0 + timedelta(seconds=10))["d"]
    assert view.runs[0].tasks == ()
    assert [c for c in fetch.calls if c[0] == "durations"] == [("durations", None), ("durations", T0)]
    assert view.durations == {"a": (90.0, 60.0), "b": (30.0,)}  # only the new successes were read


def test_one_dag_failing_leaves_the_others_and_airflow_deadlines_add_their_dags() -> None:
    """A DAG that cannot be read carries its error; Airflow's own deadlines bring their DAGs in."""
    fetch = Recorder()
    fetch.fail_dag = "broken"
    reader = RunReader(lambda now: {"d": now, "broken": now}, airflow_deadlines=True)
    views = reader.read(fetch, T0)
    assert views["broken"].error is not None
    assert "503" in views["broken"].error
    assert views["d"].error is None
    assert views["d"].airflow_deadlines == ()
    theirs = views["theirs"].airflow_deadlines
    assert theirs is not None
    assert [row.name for row in theirs] == ["sla"]


def test_unreadable_dependencies_cost_the_forecast_not_the_runs() -> None:
    """A DAG whose dependencies cannot be read still reports its runs, so a missed deadline pages."""
    fetch = Recorder()

    def no_graph(dag_id: str) -> dict[str, tuple[str, ...]]:
        raise ValueError(f"DAG {dag_id!r} has no serialized_dag row: is it parsed?")

    fetch.downstream = no_graph  # type: ignore[method-assign]
    view = RunReader(lambda now: {"d": now}).read(fetch, T0)["d"]
    assert view.error is None
    assert [run.run_id for run in view.runs] == ["r1"]
    assert view.forecast_error is not None
    assert "serialized_dag" in view.forecast_error


class FakeApi:
    """Answers the REST reads of one run's ``tis`` task instances, clamping GET pages to ``page``."""

    def __init__(self, tis: int, page: int = 100) -> None:
        self.items = [
            {"task_id": f"t{i}", "dag_run_id": "r1", "state": "running", "map_index": -1} for i in range(tis)
        ]
        self.page = page
        self.sent: list[tuple[str, str]] = []

    def get_json(self, path: str, params: dict[str, object]) -> dict[str, object]:
        self.sent.append(("GET", path))
        offset, limit = int(str(params.get("offset", 0))), min(int(str(params.get("limit", 100))), self.page)
        return {"task_instances": self.items[offset : offset + limit], "total_entries": len(self.items)}

    def post_json(self, path: str, body: dict[str, object]) -> dict[str, object]:
        self.sent.append(("POST", path))
        offset, limit = int(str(body["page_offset"])), int(str(body["page_limit"]))
        return {"task_instances": self.items[offset : offset + limit], "total_entries": len(self.items)}


def test_rest_reads_a_dags_running_runs_in_at_most_two_requests() -> None:
    """1,000 task instances: a full read is one batch POST; a read of changes is one GET, plus one
    batch POST when more changed than a GET page holds; without the batch read, ten GET pages."""
    from airflow_crashsafe.watchdog.run_fetchers import TI_BATCH_PATH, ApiRunFetcher

    api = FakeApi(1000)
    fetcher = ApiRunFetcher(api.get_json, api.post_json)
    assert {run: len(tis) for run, tis in fetcher.task_instances("d", ["r1", "r2"]).items()} == {
        "r1": 1000,
        "r2": 0,
    }
    assert api.sent == [("POST", TI_BATCH_PATH)]
    api.sent.clear()
    assert len(fetcher.task_instances("d", ["r1"], T0)["r1"]) == 1000
    assert [method for method, _ in api.sent] == ["GET", "POST"]
    api.items = api.items[:3]
    api.sent.clear()
    assert len(fetcher.task_instances("d", ["r1"], T0)["r1"]) == 3
    assert [method for method, _ in api.sent] == ["GET"]
    paged = FakeApi(1000)
    assert len(ApiRunFetcher(paged.get_json).task_instances("d", ["r1"])["r1"]) == 1000
    assert len(paged.sent) == 10


class Airflow32Api:
    """Airflow 3.2's deadline reads: ``~`` is a 404 on the UI's deadlines route, whose rows name no run."""

    def __init__(self) -> None:
        self.runs = {
            ("queued", "running"): [{"dag_id": "d", "dag_run_id": "going", "run_after": T0.isoformat()}],
            ("failed",): [{"dag_id": "d", "dag_run_id": "broke", "run_after": T0.isoformat()}],
        }
        self.deadlines = {
            "/ui/dags/d/dagRuns/going/deadlines": [
                {"deadline_time": (T0 + timedelta(hours=1)).isoformat(), "alert_name": "sla"},
                {"deadline_time": (T0 - timedelta(days=3)).isoformat(), "alert_name": "old"},
            ],
            "/ui/dags/d/dagRuns/broke/deadlines": [{"deadline_time": T0.isoformat(), "alert_name": None}],
        }
        self.asked: list[tuple[str, dict[str, object]]] = []

    def get_json(self, path: str, params: dict[str, object]) -> dict[str, object]:
        from airflow_crashsafe.watchdog.api import NotFound

        self.asked.append((path, params))
        if path == "/ui/dags/~/dagRuns/~/deadlines":
            raise NotFound(f"GET {path} answered HTTP 404")
        offset = int(str(params.get("offset", 0)))
        if path == "/api/v2/dags/~/dagRuns":
            state = params["state"]
            return {"dag_runs": self.runs[tuple(state) if isinstance(state, list) else (state,)][offset:]}
        return {"deadlines": self.deadlines[path][offset:]}


def test_rest_reads_airflow_32_deadlines_run_by_run() -> None:
    """Airflow 3.2 (no ``~`` deadlines route): going and recently failed runs are read one by one."""
    from airflow_crashsafe.watchdog.run_fetchers import ApiRunFetcher

    api = Airflow32Api()
    since = T0 - timedelta(days=1)
    found = ApiRunFetcher(api.get_json).airflow_deadlines(since)
    assert found == [
        AirflowDeadline("d", "going", T0 + timedelta(hours=1), "sla", T0),
        AirflowDeadline("d", "broke", T0, None, T0),
    ]
    failed_query = next(params for path, params in api.asked if params.get("state") == "failed")
    assert failed_query["end_date_gte"] == since.isoformat()
