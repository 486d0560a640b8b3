"""The run reader: cached dependencies and durations, task instances read incrementally, errors per DAG."""

from __future__ import annotations

from collections.abc import Collection, Sequence
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
        self,
        dag_id: str,
        run_ids: Sequence[str],
        updated_since: datetime | None = None,
        waiting: Collection[str] = (),
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
    """Airflow's REST reads of task instances over ``items``, with their filters; GET pages hold ``page``."""

    def __init__(self, tis: int, page: int = 100) -> None:
        self.items = [
            {
                "task_id": f"t{i}",
                "dag_id": "d",
                "dag_run_id": "r1",
                "state": "running",
                "map_index": -1,
                "start_date": (T0 - timedelta(hours=1)).isoformat(),
                "updated_at": T0 - timedelta(hours=1),
            }
            for i in range(tis)
        ]
        self.page = page
        self.sent: list[tuple[str, str]] = []

    def set(self, task: str, at: datetime, **fields: object) -> None:
        """Task ``task`` changes at ``at`` (its updated_at), e.g. ``state="success"``."""
        item = next(i for i in self.items if i["task_id"] == task)
        item.update(fields, updated_at=at)

    def _match(self, item: dict[str, object], f: dict[str, object]) -> bool:
        states = [None if s == "none" else s for s in f.get("state") or [item["state"]]]  # type: ignore[attr-defined]
        return (
            item["state"] in states
            and str(item["dag_id"]).startswith(str(f.get("dag_id_prefix_pattern", "")))
            and item["dag_id"] in f.get("dag_ids", [item["dag_id"]])  # type: ignore[operator]
            and item["dag_run_id"] in f.get("dag_run_ids", [item["dag_run_id"]])  # type: ignore[operator]
            and item["task_id"] in f.get("task_ids", [item["task_id"]])  # type: ignore[operator]
            and (
                "updated_at_gte" not in f
                or item["updated_at"] >= datetime.fromisoformat(str(f["updated_at_gte"]))
            )  # type: ignore[operator]
            and ("start_date_gte" not in f or str(item["start_date"]) >= str(f["start_date_gte"]))
        )

    def _answer(self, f: dict[str, object], offset: int, limit: int) -> dict[str, object]:
        found = [{k: v for k, v in i.items() if k != "updated_at"} for i in self.items if self._match(i, f)]
        return {"task_instances": found[offset : offset + limit], "total_entries": len(found)}

    def get_json(self, path: str, params: dict[str, object]) -> dict[str, object]:
        self.sent.append(("GET", path))
        limit = min(int(str(params.get("limit", 100))), self.page)
        return self._answer(params, int(str(params.get("offset", 0))), limit)

    def post_json(self, path: str, body: dict[str, object]) -> dict[str, object]:
        self.sent.append(("POST", path))
        return self._answer(body, int(str(body["page_offset"])), int(str(body["page_limit"])))


def test_rest_reads_only_what_changes_a_forecast_not_heartbeats() -> None:
    """Full read in one POST; heartbeats read nothing; real changes are found; over a page reads all."""
    from airflow_crashsafe.watchdog.run_fetchers import TI_BATCH_PATH, ApiRunFetcher

    api = FakeApi(1000)
    fetcher = ApiRunFetcher(api.get_json, api.post_json)
    assert {run: len(tis) for run, tis in fetcher.task_instances("d", ["r1", "r2"]).items()} == {
        "r1": 1000,
        "r2": 0,
    }
    assert api.sent == [("POST", TI_BATCH_PATH)]
    for item in api.items:  # every running task heartbeats: its updated_at moves, nothing else
        item["updated_at"] = T0
    api.sent.clear()
    assert fetcher.task_instances("d", ["r1"], T0 - timedelta(seconds=70)) == {"r1": []}
    assert [method for method, _ in api.sent] == ["GET", "POST"]
    api.set("t1", T0, state="success")
    api.set("t2", T0, start_date=T0.isoformat())  # a retry started
    api.set("t3", T0, state="queued")
    api.set("t4", T0 - timedelta(hours=1), state="running")  # resumed from a deferral: old start
    api.sent.clear()
    changed = fetcher.task_instances("d", ["r1"], T0 - timedelta(seconds=70), waiting={"t4"})["r1"]
    assert sorted((t.task_id, t.state) for t in changed) == [
        ("t1", "success"),
        ("t2", "running"),
        ("t3", "queued"),
        ("t4", "running"),
    ]
    assert [method for method, _ in api.sent] == ["GET", "POST", "POST"]
    for item in api.items[:150]:
        item.update(state="success", updated_at=T0)
    api.sent.clear()
    assert len(fetcher.task_instances("d", ["r1"], T0 - timedelta(seconds=70))["r1"]) == 1000
    assert [method for method, _ in api.sent] == ["GET", "POST"]  # more than a page: all again
    paged = FakeApi(1000)
    assert len(ApiRunFetcher(paged.get_json).task_instances("d", ["r1"])["r1"]) == 1000
    assert len(paged.sent) == 10


def test_rest_reader_sees_a_task_resume_from_deferral() -> None:
    """Seen queued, then running with its start from before the deferral: the next poll has it running."""
    from airflow_crashsafe.watchdog.run_fetchers import ApiRunFetcher

    api = FakeApi(3)
    api.items.append({**api.items[0], "task_id": "later", "state": "queued", "start_date": None})
    reader = RunReader(lambda now: {"d": now - timedelta(days=1)}, refresh=600)

    class Fetcher(ApiRunFetcher):
        def runs(self, dag_id: str, since: datetime) -> list[RunView]:
            return [RunView("r1", "scheduled", "running", T0 - timedelta(hours=2))]

        def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]:
            return {t["task_id"]: () for t in api.items}  # type: ignore[misc]

        def durations(
            self, dag_id: str, per_task: int, ended_since: datetime | None = None
        ) -> dict[str, tuple[float, ...]]:
            return {}

    fetcher = Fetcher(api.get_json, api.post_json)
    reader.read(fetcher, T0)
    api.set("later", T0, state="running", start_date=(T0 - timedelta(hours=1)).isoformat())
    view = reader.read(fetcher, T0 + timedelta(seconds=10))["d"]
    states = {t.task_id: t.state for t in view.runs[0].tasks}
    assert states == {"t0": "running", "t1": "running", "t2": "running", "later": "running"}


def test_rest_reads_every_watched_dags_runs_in_one_batch_read() -> None:
    """Two DAGs' runs come in one POST, each cut at its own due time; its failure marks both unread."""
    from airflow_crashsafe.watchdog.run_fetchers import RUNS_BATCH_PATH, ApiRunFetcher

    def run(dag: str, hours: int) -> dict[str, object]:
        at = (T0 - timedelta(hours=hours)).isoformat()
        return {
            "dag_id": dag,
            "dag_run_id": f"{dag}{hours}",
            "run_type": "scheduled",
            "state": "success",
            "run_after": at,
        }

    sent: list[tuple[str, dict[str, object]]] = []
    answer: dict[str, object] = {
        "dag_runs": [run("a", 1), run("b", 1), run("a", 5), run("b", 5)],
        "total_entries": 4,
    }

    def post(path: str, body: dict[str, object]) -> dict[str, object]:
        sent.append((path, body))
        if not answer:
            raise ValueError(f"POST {path} answered HTTP 503")
        return answer

    def get(path: str, params: dict[str, object]) -> dict[str, object]:
        return {"task_instances": [], "tasks": [], "total_entries": 0}

    reader = RunReader(lambda now: {"a": T0 - timedelta(hours=6), "b": T0 - timedelta(hours=2)})
    views = reader.read(ApiRunFetcher(get, post), T0)
    assert {dag: [r.run_id for r in view.runs] for dag, view in views.items()} == {
        "a": ["a1", "a5"],
        "b": ["b1"],
    }
    runs_reads = [body for path, body in sent if path == RUNS_BATCH_PATH]
    assert [(b["dag_ids"], b["run_after_gte"]) for b in runs_reads] == [
        (["a", "b"], (T0 - timedelta(hours=6)).isoformat())
    ]
    answer.clear()
    views = reader.read(ApiRunFetcher(get, post), T0)
    assert all("503" in str(view.error) for view in views.values())


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
