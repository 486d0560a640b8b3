"""fenced_transaction's own behaviour on one in-memory SQLite connection, with a recording store."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_crashsafe.errors import CrashsafeError, FencedOut
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.store.dbapi import Db, connect_url
from tests.support.fencing import make_context


class RecordingStore:
    """Stands in for the crashsafe store: keeps (kind, try, token, detail) of every event."""

    def __init__(self, *, broken: bool = False) -> None:
        self.events: list[tuple[str, int, int | None, dict[str, Any]]] = []
        self.broken = broken

    def record_event(
        self, kind: str, slot: Any, target: str, attempt: Any, *, token: Any, detail: Any
    ) -> None:
        if self.broken:
            raise ConnectionError("store is down")
        self.events.append((kind, attempt.try_number, token, dict(detail)))


@pytest.fixture
def db() -> Iterator[Db]:
    conn = connect_url("sqlite:///:memory:")
    conn.execute("CREATE TABLE out (v INTEGER)")
    yield conn
    conn.close()


def _count(db: Db) -> int:
    return int(db.execute("SELECT count(*) FROM out").fetchone()[0])


def test_commit_records_event_and_exposes_params(db: Db) -> None:
    """A clean exit commits the body and records 'committed'; params carry token and try."""
    store = RecordingStore()
    with fenced_transaction("x", "out", context=make_context(try_number=2), db=db, store=store) as tx:
        assert tx.params == {"crashsafe_token": tx.token, "crashsafe_try_number": 2}
        assert not tx.already_committed
        tx.cursor.execute("INSERT INTO out VALUES (1)")
    assert _count(db) == 1
    assert store.events == [("committed", 2, tx.token, {})]


def test_body_exception_rolls_back_and_propagates(db: Db) -> None:
    """An exception in the body rolls the write back, re-raises, and records no commit."""
    store = RecordingStore()
    tx = fenced_transaction("x", "out", context=make_context(), db=db, store=store)
    with pytest.raises(ZeroDivisionError), tx:
        _ = 1 / db.raw.execute("INSERT INTO out VALUES (1) RETURNING 0").fetchone()[0]
    assert _count(db) == 0
    assert store.events == []


def test_already_committed_skips_and_refuses_cursor(db: Db) -> None:
    """A later try of a committed slot yields already_committed, names the committer, has no cursor."""
    store = RecordingStore()
    with fenced_transaction("x", "out", context=make_context(try_number=1, ti_id="t1"), db=db, store=store):
        db.raw.execute("INSERT INTO out VALUES (1)")
    with fenced_transaction("x", "out", context=make_context(try_number=2), db=db, store=store) as tx:
        assert tx.already_committed
        assert tx.token is None
        assert tx.committed_by is not None
        assert (tx.committed_by.try_number, tx.committed_by.ti_id) == (1, "t1")
        with pytest.raises(CrashsafeError, match="already committed by try 1"):
            _ = tx.cursor
    assert store.events[-1][0] == "skipped_committed"
    assert store.events[-1][3] == {"committed_try": 1, "committed_ti_id": "t1"}


def test_older_try_is_fenced_out_at_start_with_a_clear_message(db: Db) -> None:
    """An older try starting after a newer one gets FencedOut naming the holder; the body never runs."""
    store = RecordingStore()
    newer = fenced_transaction("x", "out", context=make_context(try_number=3, ti_id="t3"), db=db, store=store)
    newer.__enter__()
    newer.__exit__(RuntimeError, RuntimeError("died"), None)  # holds the token, never committed
    older = fenced_transaction("x", "out", context=make_context(try_number=2), db=db, store=store)
    with pytest.raises(FencedOut, match=r"try 3 \(ti t3\) holds the slot") as caught, older:
        pytest.fail("the body of a fenced-out attempt must not run")
    assert caught.value.token is None
    assert store.events[-1][0] == "fenced_out"
    assert store.events[-1][3]["stage"] == "start"


def test_store_outage_is_logged_not_raised(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """A store that raises on record_event does not fail a committed write; a warning says so."""
    logger = logging.getLogger("airflow_crashsafe")
    logger.addHandler(caplog.handler)  # Airflow's logging setup may have dropped caplog's root handler
    try:
        with (
            caplog.at_level(logging.WARNING, logger="airflow_crashsafe"),
            fenced_transaction(
                "x", "out", context=make_context(), db=db, store=RecordingStore(broken=True)
            ) as tx,
        ):
            tx.cursor.execute("INSERT INTO out VALUES (1)")
    finally:
        logger.removeHandler(caplog.handler)
    assert _count(db) == 1
    assert any("could not record committed event" in r.getMessage() for r in caplog.records)
