"""The crashsafe store on real databases: migration, concurrent first use, where it lives."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from airflow_crashsafe import config
from airflow_crashsafe.errors import StoreError
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import open_store, reset_store_cache
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.schema import VERSION_TABLE, latest_version
from airflow_crashsafe.store.store import Store
from tests.support.processes import race_context, start_children
from tests.support.store_race import migrate_in_child

pytestmark = pytest.mark.integration

SLOT = Slot("store_dag", "load", -1, "2024-01-02T00:00:00+00:00")
ATTEMPT = Attempt(try_number=1, ti_id="ti-1", run_id="run", clear_number=0)


@pytest.fixture(params=["postgresql", "sqlite"])
def store_db_url(request: pytest.FixtureRequest) -> str:
    """A fresh database of each kind for a store."""
    url: str = request.getfixturevalue("postgres_url" if request.param == "postgresql" else "sqlite_url")
    return url


@pytest.fixture
def make_store(store_db_url: str) -> Iterator[Callable[[], Store]]:
    """Factory of independent stores on the same database (closed afterwards)."""
    made: list[Store] = []

    def make() -> Store:
        store = Store(lambda: connect_url(store_db_url), location=store_db_url)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def _versions(url: str) -> list[int]:
    db = connect_url(url)
    try:
        db.begin()
        rows = db.execute(f"SELECT version FROM {VERSION_TABLE} ORDER BY version").fetchall()
        db.rollback()
        return [int(r[0]) for r in rows]
    finally:
        db.close()


@pytest.fixture
def _isolated_store_cache() -> Iterator[None]:
    reset_store_cache()
    yield
    reset_store_cache()


def test_migrate_is_idempotent(make_store: Callable[[], Store], store_db_url: str) -> None:
    """Migrating twice, also from a second store object, applies each version once."""
    assert make_store().migrate() == latest_version()
    assert make_store().migrate() == latest_version()
    assert make_store().schema_version() == latest_version()
    assert _versions(store_db_url) == list(range(1, latest_version() + 1))


@pytest.mark.slow
def test_concurrent_first_use_by_many_processes_does_not_race(store_db_url: str) -> None:
    """8 processes migrating a fresh store at the same moment all succeed; each version is applied once."""
    ctx = race_context()
    barrier, results = ctx.Barrier(8), ctx.Queue()
    procs = start_children(ctx, migrate_in_child, [(store_db_url, barrier, results)] * 8)
    outcomes = [results.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    assert outcomes == [("ok", latest_version())] * 8
    assert _versions(store_db_url) == list(range(1, latest_version() + 1))


def test_store_newer_than_package_is_refused(make_store: Callable[[], Store], store_db_url: str) -> None:
    """A store migrated by a newer package raises StoreError telling the operator to upgrade."""
    make_store().migrate()
    db = connect_url(store_db_url)
    db.begin()
    db.execute(f"INSERT INTO {VERSION_TABLE} (version, description) VALUES (99, 'from the future')")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=r"schema version 99, newer than this package.*upgrade"):
        make_store().migrate()


def test_events_round_trip(make_store: Callable[[], Store]) -> None:
    """Recorded events come back oldest first, filtered by DAG and kind, with their detail."""
    store = make_store()
    store.record_event("committed", SLOT, "t", ATTEMPT, token=3, detail={"rows": 2})
    store.record_event("fenced_out", SLOT, "t", ATTEMPT, token=2, detail={"stage": "commit"})
    other = Slot("other_dag", "load", 0, "p")
    store.record_event("committed", other, "t", ATTEMPT, token=1)
    events = store.events(dag_id="store_dag")
    assert [(e["kind"], e["token"], e["detail"]) for e in events] == [
        ("committed", 3, {"rows": 2}),
        ("fenced_out", 2, {"stage": "commit"}),
    ]
    assert [e["dag_id"] for e in store.events(kinds=["committed"])] == ["store_dag", "other_dag"]


@pytest.mark.usefixtures("_isolated_store_cache")
def test_open_store_without_connection_uses_embedded_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no crashsafe_default connection the store is a SQLite file under $AIRFLOW_HOME."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.delenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", raising=False)
    monkeypatch.delenv("AIRFLOW__CRASHSAFE__CONN_ID", raising=False)
    config.reset_cache()
    store = open_store()
    assert store.location == str(tmp_path / "crashsafe.db")
    store.record_event("committed", SLOT, "t", ATTEMPT, token=1)
    assert (tmp_path / "crashsafe.db").is_file()
    assert [e["kind"] for e in store.events()] == ["committed"]
    assert open_store() is store


@pytest.mark.usefixtures("_isolated_store_cache")
def test_open_store_uses_the_crashsafe_default_connection(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With AIRFLOW_CONN_CRASHSAFE_DEFAULT set to PostgreSQL, events land in that database."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    monkeypatch.delenv("AIRFLOW__CRASHSAFE__CONN_ID", raising=False)
    config.reset_cache()
    store = open_store()
    assert store.location == "connection 'crashsafe_default'"
    store.record_event("committed", SLOT, "t", ATTEMPT, token=7)
    reset_store_cache()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT kind, dag_id, token FROM crashsafe_events").fetchall()
    assert rows == [("committed", "store_dag", 7)]
    assert not (tmp_path / "crashsafe.db").exists()
