"""store/prepared.py on a real PostgreSQL 15: the ledger's fast path gives what the general one does.

Each failure the fast path meets is produced for real: a missing table, a prepared statement the
server no longer knows (what a pooler in transaction mode does), a backend terminated while the
statement runs, and a signal handler raising in the middle of the wait.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import psycopg
import pytest

from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.prepared import fetch_text
from airflow_crashsafe.store.store import Store

pytestmark = pytest.mark.integration

_INSERT = (
    "INSERT INTO things (name, size, note) VALUES (%(name)s, %(size)s, %(note)s)"
    " RETURNING id::text, name, size::text, note"
)


@pytest.fixture
def db(postgres_url: str) -> Iterator[Db]:
    db = connect_url(postgres_url)
    db.execute_alone(
        "CREATE TABLE things (id SERIAL PRIMARY KEY, name TEXT NOT NULL, size INTEGER, note TEXT)"
    )
    yield db
    db.close()


def _server_prepared(db: Db) -> list[str]:
    rows = db.execute_alone("SELECT name FROM pg_prepared_statements ORDER BY name").fetchall()
    return [str(row[0]) for row in rows]


def test_rows_come_back_as_text_and_are_committed_at_once(db: Db, postgres_url: str) -> None:
    rows = fetch_text(db, _INSERT, {"name": "a", "size": 3, "note": None})
    assert rows == [("1", "a", "3", None)]
    other = connect_url(postgres_url)  # another session sees it: the statement was its own transaction
    try:
        assert other.execute_alone("SELECT name, size FROM things").fetchall() == [("a", 3)]
    finally:
        other.close()


def test_the_statement_is_prepared_once_per_connection(db: Db) -> None:
    for n in range(5):
        fetch_text(db, _INSERT, {"name": f"t{n}", "size": n, "note": "x"})
    assert db.prepared is not None
    assert len(db.prepared) == 1
    assert _server_prepared(db) == ["crashsafe_1"]
    # A NULL where an integer was: another parameter type, so another prepared statement.
    fetch_text(db, _INSERT, {"name": "none", "size": None, "note": None})
    assert _server_prepared(db) == ["crashsafe_1", "crashsafe_2"]


def test_fast_and_general_paths_give_the_same_rows(db: Db) -> None:
    fast = fetch_text(db, _INSERT, {"name": "same", "size": 7, "note": "ü ✓"})
    db.prepared = None  # what a connection that must not prepare gets
    general = fetch_text(db, _INSERT, {"name": "same", "size": 7, "note": "ü ✓"})
    assert [row[1:] for row in fast] == [row[1:] for row in general] == [("same", "7", "ü ✓")]


def test_a_statement_without_rows_returns_none(db: Db) -> None:
    fetch_text(db, _INSERT, {"name": "gone", "size": 1, "note": None})
    assert (
        fetch_text(db, "UPDATE things SET size = %(size)s WHERE name = %(name)s", {"size": 2, "name": "gone"})
        == []
    )
    assert db.execute_alone("SELECT size FROM things WHERE name = 'gone'").fetchone() == (2,)


def test_an_error_is_psycopgs_own_and_the_connection_stays_usable(db: Db) -> None:
    with pytest.raises(psycopg.errors.UndefinedTable) as raised:
        fetch_text(db, "SELECT x::text FROM no_such_table WHERE x = %(x)s", {"x": 1})
    assert raised.value.sqlstate == "42P01"
    with pytest.raises(psycopg.errors.NotNullViolation):
        fetch_text(db, _INSERT, {"name": None, "size": 1, "note": None})
    assert fetch_text(db, _INSERT, {"name": "after", "size": 1, "note": None})[0][1] == "after"


def test_a_prepared_statement_the_server_forgot_falls_back_and_loses_nothing(db: Db) -> None:
    fetch_text(db, _INSERT, {"name": "before", "size": 1, "note": None})
    db.execute_alone("DEALLOCATE ALL")  # a pooler in transaction mode hands over another connection
    rows = fetch_text(db, _INSERT, {"name": "after", "size": 2, "note": None})
    assert [row[1] for row in rows] == ["after"]
    assert db.prepared is None  # this connection does not prepare again
    assert db.execute_alone("SELECT name FROM things ORDER BY id").fetchall() == [("before",), ("after",)]


def test_inside_an_open_transaction_it_refuses_instead_of_joining_it(db: Db) -> None:
    db.begin()
    db.execute("SELECT 1")
    with pytest.raises(psycopg.ProgrammingError):
        fetch_text(db, _INSERT, {"name": "inside", "size": 1, "note": None})
    db.rollback()
    assert db.execute_alone("SELECT count(*) FROM things").fetchone() == (0,)


def test_a_parameter_of_another_type_takes_the_general_path(db: Db) -> None:
    rows = fetch_text(db, "SELECT (%(x)s * 2)::text", {"x": 1.25})
    assert rows == [("2.5",)]
    assert db.prepared == {}


def test_a_backend_terminated_mid_statement_raises_and_the_store_reconnects(postgres_url: str) -> None:
    store = Store(lambda: connect_url(postgres_url), location=postgres_url)
    try:
        db = store.connection()
        pid = int(db.execute_alone("SELECT pg_backend_pid()").fetchone()[0])
        killer = connect_url(postgres_url)
        threading.Timer(0.3, lambda: killer.execute_alone(f"SELECT pg_terminate_backend({pid})")).start()
        with pytest.raises(psycopg.OperationalError):
            fetch_text(db, "SELECT pg_sleep(%(s)s)::text", {"s": 5})
        assert db.is_broken()
        assert fetch_text(store.connection(), "SELECT %(x)s::text", {"x": "back"}) == [("back",)]
        killer.close()
    finally:
        store.close()


def test_a_signal_handler_raising_mid_wait_closes_the_connection(db: Db) -> None:
    class Stop(Exception):
        pass

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stop

    previous = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        began = time.monotonic()
        with pytest.raises(Stop):
            fetch_text(db, "SELECT pg_sleep(%(s)s)::text", {"s": 5})
        assert time.monotonic() - began < 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    # The answer was never read: the connection is closed rather than left mid-statement.
    assert db.is_broken()


def test_sqlite_takes_the_general_path(sqlite_url: str) -> None:
    db = connect_url(sqlite_url)
    try:
        db.execute("CREATE TABLE things (id INTEGER PRIMARY KEY, name TEXT, size INTEGER, note TEXT)")
        rows = fetch_text(
            db,
            "INSERT INTO things (name, size) VALUES (%(name)s, %(size)s) RETURNING id, name, size",
            {"name": "s", "size": 4},
        )
        assert rows == [("1", "s", "4")]
    finally:
        db.close()


@pytest.mark.parametrize("spin_ms", ["0", "2"])
def test_an_answer_slower_than_the_spin_is_still_awaited(
    db: Db, spin_ms: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[crashsafe] ledger_spin_wait_ms`` only decides how the wait starts, never its outcome."""
    from airflow_crashsafe import config

    monkeypatch.setenv("AIRFLOW__CRASHSAFE__LEDGER_SPIN_WAIT_MS", spin_ms)
    config.reset_cache()
    began = time.monotonic()
    assert fetch_text(db, "SELECT pg_sleep(%(s)s)::text || 'done'", {"s": 0.05}) == [("done",)]
    assert time.monotonic() - began >= 0.05
