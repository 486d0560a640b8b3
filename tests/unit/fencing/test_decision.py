"""decide(): run, skip or refuse a fenced write, on one SQLite connection (no server-side units)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing.decision import Adoption, Resume, Run, Skip, decide
from airflow_crashsafe.fencing.transaction import open_write
from airflow_crashsafe.identity import attempt_from_context, slot_from_context
from airflow_crashsafe.store import Store, open_store, reset_store_cache
from airflow_crashsafe.store.dbapi import Db, connect_url
from tests.support.fencing import make_context

ADOPTION = Adoption(enabled=True, timeout_seconds=60.0)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The configured crashsafe store: an embedded file of this test's own."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__CONN_ID", "crashsafe_store_not_defined")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "store.db"))
    reset_store_cache()
    yield open_store()
    reset_store_cache()


@pytest.fixture
def db() -> Iterator[Db]:
    conn = connect_url("sqlite:///:memory:")
    yield conn
    conn.close()


def _decide(db: Db, try_number: int, ti_id: str) -> Run | Skip:
    ctx = make_context(try_number=try_number, ti_id=ti_id)
    slot, attempt = slot_from_context(ctx), attempt_from_context(ctx)
    decision = decide(db, slot, "out", attempt, Resume(), ADOPTION, in_flight_units=False)
    assert isinstance(decision, Run | Skip)
    return decision


def test_a_first_attempt_runs_with_the_first_token(db: Db, store: Store) -> None:
    """Nothing committed, nothing in flight: Run with token 1 and nothing recorded yet."""
    decision = _decide(db, 1, "t1")
    assert isinstance(decision, Run)
    assert (decision.token, decision.target, decision.attempt.try_number) == (1, "out", 1)
    assert store.events() == []


def test_a_retry_of_a_committed_slot_is_skipped_and_recorded(db: Db, store: Store) -> None:
    """After try 1 committed, try 2 is Skip naming try 1, with the skip result and event."""
    run = _decide(db, 1, "t1")
    assert isinstance(run, Run)
    with open_write(db, run.slot, run.target, run.attempt, run.token):
        pass
    skip = _decide(db, 2, "t2")
    assert isinstance(skip, Skip)
    assert "try 1 (ti t1" in skip.by
    assert skip.result == {"rows": None, "token": None, "committed_by": skip.by, "skipped": True}
    assert [e["kind"] for e in store.events()] == ["committed", "skipped_committed"]


def test_an_older_try_is_fenced_out_at_start(db: Db, store: Store) -> None:
    """Once try 3 holds the slot, try 2 raises FencedOut and the rejection is recorded."""
    _decide(db, 3, "t3")
    with pytest.raises(FencedOut, match="fenced out at start"):
        _decide(db, 2, "t2")
    assert [e["kind"] for e in store.events()] == ["fenced_out"]


def test_resume_reads_the_trigger_event() -> None:
    """A timeout event marks the resume timed out; an ended one does not; kwargs are kept."""
    awaited = {"unit_id": "u", "token": 3}
    timed_out = Resume.after_trigger(awaited, 12.5, {"status": "timeout"})
    ended = Resume.after_trigger(awaited, 12.5, {"status": "ended"})
    assert (timed_out.timed_out, ended.timed_out) == (True, False)
    assert (ended.awaited, ended.deadline) == (awaited, 12.5)
    assert Resume() == Resume(awaited=None, deadline=None, timed_out=False)
