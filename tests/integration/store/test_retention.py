"""Retention (`airflow-crashsafe db prune`): old records go, what a live slot needs stays."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.cli.main import main
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences, units
from airflow_crashsafe.store.attempts import record
from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.retention import prune_store, prune_target
from airflow_crashsafe.store.store import Store

pytestmark = pytest.mark.integration

ATTEMPT = Attempt(run_id="r", try_number=1, ti_id="ti-1", hostname="w1", pid=7, clear_number=0)
CUTOFF = datetime.now(timezone.utc) - timedelta(days=30)


def slot(name: str) -> Slot:
    return Slot("retained", name, -1, "2026-01-01")


@pytest.fixture(params=["postgres", "sqlite"])
def url(request: pytest.FixtureRequest) -> str:
    """A fresh database of each kind, serving as store and as target."""
    found: str = request.getfixturevalue("postgres_url" if request.param == "postgres" else "sqlite_url")
    return found


def _ago(db: Db, days: int, *, fence: bool = False) -> str:
    """SQL for a time ``days`` back, as the table at hand stores times."""
    if db.dialect.is_postgres:
        return f"now() - interval '{days} days'"
    if fence:
        return f"datetime('now', '-{days} days')"
    return f"strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{days} days')"


def _seed_store(url: str) -> None:
    store = Store(lambda: connect_url(url), url)
    try:
        for name in ("old", "new"):
            store.record_event("fenced_out", slot(name), "t", ATTEMPT, token=1)
            with store.transaction() as db:
                record(
                    db,
                    AttemptEvent(
                        source="listener",
                        dag_id="retained",
                        task_id=name,
                        map_index=-1,
                        run_id="r",
                        try_number=1,
                        hostname="w1",
                        pid=7,
                    ),
                )
        with store.transaction() as db:
            db.execute(f"UPDATE crashsafe_events SET created_at = {_ago(db, 40)} WHERE task_id = 'old'")
            db.execute(f"UPDATE crashsafe_attempts SET updated_at = {_ago(db, 40)} WHERE task_id = 'old'")
    finally:
        store.close()


def _seed_fences(db: Db) -> None:
    """Fence rows: idle for 40 days, committed 5 days ago, issued now, a running unit's, a ledger call's."""
    for name in ("idle", "committed_lately", "issued_now", "unit_running"):
        token = fences.issue_token(db, slot(name), "warehouse.facts", ATTEMPT).token
        assert token is not None
    fences.issue_token(db, slot("idle"), "ledger:payments", ATTEMPT)
    db.begin()
    old = _ago(db, 40, fence=True)
    db.execute(f"UPDATE crashsafe_fences SET issued_at = {old}, committed_at = {old} WHERE task_id = 'idle'")
    if db.dialect.is_postgres:  # units exist there only: its unit keeps this idle row
        db.execute(f"UPDATE crashsafe_fences SET issued_at = {old} WHERE task_id = 'unit_running'")
    db.execute(
        f"UPDATE crashsafe_fences SET issued_at = {old}, committed_at = {_ago(db, 5, fence=True)}"
        " WHERE task_id = 'committed_lately'"
    )
    db.commit()
    if db.dialect.is_postgres:
        units.ensure_unit_table(db)
        db.begin()
        running = units.record_start(db, slot("unit_running"), "warehouse.facts", ATTEMPT, 1)
        finished = units.record_start(db, slot("idle"), "warehouse.facts", ATTEMPT, 1)
        recent = units.record_start(db, slot("issued_now"), "warehouse.facts", ATTEMPT, 1)
        db.execute(
            "UPDATE crashsafe_units SET state = 'committed', finished_at = now() - interval '40 days',"
            " started_at = now() - interval '40 days' WHERE unit_id = %(u)s",
            {"u": finished},
        )
        db.execute(
            "UPDATE crashsafe_units SET state = 'failed', finished_at = now() WHERE unit_id = %(u)s",
            {"u": recent},
        )
        db.execute(
            "UPDATE crashsafe_units SET started_at = now() - interval '40 days' WHERE unit_id = %(u)s",
            {"u": running},
        )
        db.commit()


def _left(db: Db, table: str) -> list[str]:
    db.begin()
    rows = db.execute(f"SELECT task_id, target FROM {table} ORDER BY task_id, target").fetchall()
    db.rollback()
    return [f"{task}:{target}" for task, target in rows]


def test_prune_deletes_only_what_no_live_slot_needs(url: str) -> None:
    """Old events, attempts, finished units and idle fence rows go; recent or live ones stay."""
    _seed_store(url)
    db = connect_url(url)
    try:
        _seed_fences(db)
        db.begin()
        counted = prune_target(db, older_than=CUTOFF, dry_run=True) | prune_store(
            db, older_than=CUTOFF, dry_run=True
        )
        db.rollback()
        db.begin()
        deleted = prune_target(db, older_than=CUTOFF) | prune_store(db, older_than=CUTOFF)
        db.commit()
        assert counted == deleted
        assert deleted["crashsafe_events"] == 1
        assert deleted["crashsafe_attempts"] == 1
        assert deleted["crashsafe_fences"] == 1
        assert _left(db, "crashsafe_fences") == [
            "committed_lately:warehouse.facts",
            "idle:ledger:payments",
            "issued_now:warehouse.facts",
            "unit_running:warehouse.facts",
        ]
        if db.dialect.is_postgres:
            assert deleted["crashsafe_units"] == 1
            assert _left(db, "crashsafe_units") == [
                "issued_now:warehouse.facts",
                "unit_running:warehouse.facts",
            ]
        assert _left(db, "crashsafe_events") == ["new:t"]
    finally:
        db.close()


def test_db_prune_command_prunes_store_and_named_targets(
    url: str, airflow_conn: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`db prune --older-than 30 --conn-id target` reports and deletes; --dry-run deletes nothing."""
    _seed_store(url)
    setup = connect_url(url)
    try:
        _seed_fences(setup)
    finally:
        setup.close()
    airflow_conn("crashsafe_default", url)
    airflow_conn("warehouse", url)
    assert main(["db", "prune", "--older-than", "30", "--dry-run", "--conn-id", "warehouse"]) == 0
    assert "would delete 1 from crashsafe_events" in capsys.readouterr().out
    assert main(["db", "prune", "--older-than", "30", "--conn-id", "warehouse"]) == 0
    out = capsys.readouterr().out
    assert "store: deleted 1 from crashsafe_events, 1 from crashsafe_attempts" in out
    assert "connection 'warehouse': deleted" in out
    assert "1 from crashsafe_fences" in out
    assert main(["db", "prune", "--older-than", "0"]) == 2  # a fence must outlive any retry
