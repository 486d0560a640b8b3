"""Runs at risk over a real Airflow metadata database: deadlines, forecast, critical path, access.

The metadata database is a SQLite file, then a throwaway PostgreSQL database, with Airflow
3.3.2's own schema (its models' ``create_all``, once per module and database); rows are written
as Airflow writes them: runs, task instances with their durations, the DAG's ``serialized_dag``
row, and a ``DeadlineAlert``'s ``deadline`` rows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session

from airflow_crashsafe.store.store import open_store, reset_store_cache
from airflow_crashsafe.ui.metadata import metadata_session
from tests.unit.ui.conftest import UiHarness

pytestmark = pytest.mark.integration

GRAPH = {"extract": ["transform"], "transform": ["load"], "load": []}
HISTORY = {"extract": 600.0, "transform": 1200.0, "load": 300.0}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A metadata database with Airflow's own tables (created from its models): a SQLite file, and
    a throwaway PostgreSQL database whose sessions skip foreign-key checks (rows are written
    without the DAG, version and callback rows Airflow would write beside them)."""
    from airflow.models import import_all_models
    from airflow.models.base import Base

    import_all_models()
    if request.param == "sqlite":
        engine = create_engine(f"sqlite:///{tmp_path_factory.mktemp('metadata') / 'airflow.db'}")
        admin = url = None
    else:
        from airflow_crashsafe.testing.postgres import drop_database, make_database

        admin = request.getfixturevalue("postgres_server_url")
        url = make_database(admin, prefix="risk_metadata")
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        event.listen(engine, "connect", _no_foreign_keys)
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()
    if admin and url:
        drop_database(admin, url)


def _no_foreign_keys(dbapi_connection: Any, _record: Any) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
    dbapi_connection.commit()


class Metadata:
    """Writes Airflow's rows for one test (the tables are emptied before it)."""

    def __init__(self, engine: Engine, now: datetime) -> None:
        from airflow.models.base import Base

        self.engine, self.now, self.tables = engine, now, Base.metadata.tables
        with engine.begin() as conn:
            for name in ("deadline", "deadline_alert", "task_instance", "dag_run", "serialized_dag"):
                conn.execute(self.tables[name].delete())

    def insert(self, table: str, **row: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(self.tables[table].insert().values(**row))

    def dag(self, dag_id: str, graph: dict[str, list[str]]) -> None:
        tasks = [
            {"__type": "operator", "__var": {"task_id": t, "downstream_task_ids": d}}
            for t, d in graph.items()
        ]
        self.insert(
            "serialized_dag",
            id=uuid.uuid4(),
            dag_id=dag_id,
            created_at=self.now,
            last_updated=self.now,
            dag_hash="0" * 32,
            dag_version_id=uuid.uuid4(),
            data=json.loads(json.dumps({"__version": 3, "dag": {"dag_id": dag_id, "tasks": tasks}})),
        )

    def run(self, dag_id: str, run_id: str, state: str, run_after: datetime) -> int:
        with self.engine.begin() as conn:
            result = conn.execute(
                self.tables["dag_run"]
                .insert()
                .values(
                    dag_id=dag_id,
                    run_id=run_id,
                    run_type="scheduled",
                    state=state,
                    run_after=run_after,
                    logical_date=run_after,
                    start_date=run_after,
                    clear_number=0,
                )
            )
            return int(result.inserted_primary_key[0])

    def ti(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        state: str | None,
        start: datetime | None = None,
        duration: float | None = None,
    ) -> None:
        self.insert(
            "task_instance",
            id=uuid.uuid4(),
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=-1,
            try_number=1,
            max_tries=0,
            pool="default_pool",
            pool_slots=1,
            state=state,
            start_date=start,
            end_date=start + timedelta(seconds=duration) if start and duration else None,
            duration=duration,
        )

    def history(self, dag_id: str, durations: dict[str, float], runs: int = 3) -> None:
        for n in range(runs):
            after = self.now - timedelta(days=n + 1)
            run_id = f"scheduled__past_{n}"
            self.run(dag_id, run_id, "success", after)
            for task, seconds in durations.items():
                self.ti(dag_id, run_id, task, "success", after, seconds + n)

    def airflow_deadline(self, run_pk: int, at: datetime, name: str) -> None:
        alert = uuid.uuid4()
        self.insert(
            "deadline_alert",
            id=alert,
            created_at=self.now,
            serialized_dag_id=uuid.uuid4(),
            name=name,
            reference={"reference_type": "DagRunQueuedAtDeadline"},
            interval=3600.0,
            callback_def={},
        )
        self.insert(
            "deadline",
            id=uuid.uuid4(),
            created_at=self.now,
            last_updated_at=self.now,
            dagrun_id=run_pk,
            deadline_time=at,
            missed=False,
            callback_id=uuid.uuid4(),
            deadline_alert_id=alert,
        )


@pytest.fixture
def ui(
    sqlite_url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[UiHarness]:
    """The UI with the metadata database above; alice signed in, reading no DAG yet."""
    reset_store_cache()
    store = open_store(sqlite_url)
    store.migrate()
    harness = UiHarness(store)

    def session() -> Iterator[Session]:
        with Session(engine) as s:
            yield s

    harness.app.dependency_overrides[metadata_session] = session
    try:
        yield harness
    finally:
        harness.client.close()
        reset_store_cache()


@pytest.fixture
def world(ui: UiHarness, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Metadata:
    """alice_nightly: a [[deadlines]] entry 10 minutes away and a run forecast 30 minutes out
    (extract half done, transform and load to go); an Airflow deadline an hour past on its other
    running run; bob_ledger: an Airflow DeadlineAlert's deadline two hours away, one short task left."""
    now = datetime.now(timezone.utc).replace(microsecond=0)
    meta = Metadata(engine, now)
    meta.dag("alice_nightly", GRAPH)
    meta.history("alice_nightly", HISTORY)
    meta.run("alice_nightly", "scheduled__now", "running", now - timedelta(minutes=30))
    meta.ti("alice_nightly", "scheduled__now", "extract", "running", now - timedelta(minutes=5))
    meta.ti("alice_nightly", "scheduled__now", "transform", None)
    meta.ti("alice_nightly", "scheduled__now", "load", None)
    late = meta.run("alice_nightly", "manual__late", "running", now - timedelta(hours=3))
    meta.airflow_deadline(late, now - timedelta(hours=1), "<b>sla</b>")
    meta.dag("bob_ledger", {"post": []})
    meta.history("bob_ledger", {"post": 60.0})
    bob = meta.run("bob_ledger", "scheduled__now", "queued", now - timedelta(minutes=1))
    meta.airflow_deadline(bob, now + timedelta(hours=2), "ledger_sla")
    at = (now + timedelta(minutes=10)).strftime("%H:%M")
    rules = tmp_path / "watchdog.toml"
    rules.write_text(
        "[watch]\ndeadline_default_duration = 120\n\n"
        f'[[deadlines]]\nname = "nightly"\ndag_id = "alice_nightly"\nat = "{at}"\n'
        '\n[[deadlines]]\ndag_id = "bob_ledger"\nat = "23:59"\n'
    )
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__DEADLINES_CONFIG", str(rules))
    ui.allowed = {"alice_nightly"}
    return meta


def test_a_run_forecast_past_its_deadline_is_at_risk_with_its_critical_path(
    world: Metadata, ui: UiHarness
) -> None:
    """The [[deadlines]] run: forecast ~30 min out against a deadline 10 min away, extract's
    remaining half, then transform and load in full, on the critical path."""
    body = ui.get("/api/runs-at-risk", dag_id="alice_nightly").json()
    nightly = next(i for i in body["items"] if i["deadline"] == "nightly")
    assert nightly["run_id"] == "scheduled__now"
    assert nightly["source"] == "crashsafe"
    assert nightly["state"] == "at_risk"
    path = {t["task_id"]: t["remaining_seconds"] for t in nightly["critical_path"]}
    assert list(path) == ["extract", "transform", "load"]
    assert path["transform"] == 1201.0  # the median of 1200, 1201 and 1202
    assert path["load"] == 301.0
    assert 290 <= path["extract"] <= 310  # 601 expected, 5 minutes run
    finish = datetime.fromisoformat(nightly["forecast_finish"])
    assert abs((finish - world.now).total_seconds() - sum(path.values())) < 30
    assert -1300 < nightly["slack_seconds"] < -1000


def test_airflow_deadline_rows_are_shown_and_a_past_one_is_missed(world: Metadata, ui: UiHarness) -> None:
    """A DeadlineAlert's deadline row of a running run shows too; past its time it is missed, first."""
    items = ui.get("/api/runs-at-risk").json()["items"]
    assert items[0]["state"] == "missed"
    assert items[0]["deadline"] == "airflow:<b>sla</b>"
    assert items[0]["source"] == "airflow"
    assert {i["run_id"] for i in items} == {"manual__late", "scheduled__now"}
    html = ui.get("/runs-at-risk").text
    assert "airflow:&lt;b&gt;sla&lt;/b&gt;" in html  # escaped
    assert "<b>sla</b>" not in html


def test_a_user_who_cannot_read_the_dag_sees_nothing_of_it(world: Metadata, ui: UiHarness) -> None:
    """alice reads alice_nightly only: bob_ledger's run, deadline and tasks never show, filtered or not."""
    assert all(i["dag_id"] == "alice_nightly" for i in ui.get("/api/runs-at-risk").json()["items"])
    assert ui.get("/api/runs-at-risk", dag_id="bob_ledger").json()["items"] == []
    for params in ({}, {"dag_id": "bob_ledger"}):
        assert "bob_ledger" not in ui.get("/runs-at-risk", **params).text
        assert "ledger_sla" not in ui.get("/runs-at-risk", **params).text
    ui.allowed = set()
    assert ui.get("/api/runs-at-risk").json()["total"] == 0
    ui.user = None
    assert ui.get("/api/runs-at-risk").status_code == 401


def test_a_reader_of_both_dags_sees_both_and_filters_by_state(world: Metadata, ui: UiHarness) -> None:
    """With bob_ledger readable, its queued run is on track (one 61 s task, two hours left)."""
    ui.allowed = {"alice_nightly", "bob_ledger"}
    items = ui.get("/api/runs-at-risk", state="on_track").json()["items"]
    bob = [i for i in items if i["dag_id"] == "bob_ledger"]
    assert {i["deadline"] for i in bob} >= {"airflow:ledger_sla"}
    assert all(i["state"] == "on_track" for i in items)
    assert [t["task_id"] for t in bob[0]["critical_path"]] == ["post"]
    page = ui.get("/runs-at-risk").text
    assert "Runs at risk" in page
    assert "ledger_sla" in page


def test_an_unreadable_deadlines_file_is_a_one_line_problem(
    world: Metadata, ui: UiHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlines_config that does not exist: the page says so and still shows Airflow's deadlines."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__DEADLINES_CONFIG", "/nonexistent/watchdog.toml")
    body = ui.get("/api/runs-at-risk").json()
    assert len(body["problems"]) == 1
    assert "deadlines_config" in body["problems"][0]
    assert [i["source"] for i in body["items"]] == ["airflow"]


@pytest.mark.parametrize(
    "content",
    [None, "[[deadlines]\n", "[watch]\ndeadline_keep = -1\n"],
    ids=["missing", "not_toml", "bad_number"],
)
def test_a_deadlines_file_problem_names_the_file_not_its_server_directory(
    world: Metadata, ui: UiHarness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    """The problem a bad deadlines_config shows names the file as `sources` does, never its directory."""
    secret_dir = tmp_path / "srv-secret-layout" / "etc"
    secret_dir.mkdir(parents=True)
    path = secret_dir / "watchdog.toml"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__DEADLINES_CONFIG", str(path))
    body = ui.get("/api/runs-at-risk").json()
    assert body["sources"] == ["Airflow's DeadlineAlerts", "[[deadlines]] of watchdog.toml"]
    [problem] = body["problems"]
    assert "watchdog.toml" in problem
    assert "srv-secret-layout" not in problem
    assert str(tmp_path) not in problem
    assert "srv-secret-layout" not in ui.get("/runs-at-risk").text
