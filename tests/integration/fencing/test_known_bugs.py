"""Regression tests for defects found in the core: SQLite snapshots, lost store connections, close()."""

from __future__ import annotations

import subprocess
import sys
import threading

import psycopg
import pytest

from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.store import Store
from tests.support.fencing import make_context

pytestmark = pytest.mark.integration


def test_sqlite_body_reading_before_writing_survives_an_unrelated_commit(
    sqlite_url: str, store: Store
) -> None:
    """A SQLite body that reads first still commits when another slot commits meanwhile."""
    mine, other = connect_url(sqlite_url), connect_url(sqlite_url)
    done: list[str] = []

    def other_slot() -> None:
        with fenced_transaction("x", "out", context=make_context(task_id="b"), db=other, store=store):
            pass  # another slot of the same database takes a token and commits
        done.append("b")

    try:
        mine.execute("CREATE TABLE out (v INTEGER)")
        with fenced_transaction("x", "out", context=make_context(task_id="warm"), db=mine, store=store):
            pass  # creates the fence table
        with fenced_transaction("x", "out", context=make_context(task_id="a"), db=mine, store=store) as tx:
            tx.cursor.execute("SELECT count(*) FROM out").fetchall()
            worker = threading.Thread(target=other_slot)
            worker.start()
            worker.join(timeout=1.0)  # commits now, or waits for our write lock
            tx.cursor.execute("INSERT INTO out VALUES (1)")
        done.append("a")
        worker.join(timeout=60)
        assert sorted(done) == ["a", "b"]
    finally:
        mine.close()
        other.close()


def test_store_reconnects_after_losing_its_connection(postgres_url: str) -> None:
    """After the store's PostgreSQL session is killed, the next event is recorded on a new one."""
    store = Store(lambda: connect_url(postgres_url), location=postgres_url)
    slot, attempt = Slot("d", "t", -1, "p"), Attempt(1, "ti", "run", 0)
    try:
        store.record_event("committed", slot, "x", attempt)
        dbname = postgres_url.rsplit("/", 1)[1]
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (dbname,),
            )
        with pytest.raises(Exception, match="connection"):
            store.record_event("committed", slot, "x", attempt)  # the in-flight loss may surface once
        store.record_event("committed", slot, "x", attempt)
        assert len(store.events()) == 2
    finally:
        store.close()


_CLOSE_WHILE_IN_USE = """
import sys, threading
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.store import Store
url = sys.argv[1]
store = Store(lambda: connect_url(url), url)
store.migrate()
slot, attempt = Slot("d", "t", -1, "p"), Attempt(1, "ti", "r", 0)
def work():
    for _ in range(300):
        try:
            store.record_event("committed", slot, "x", attempt)
        except Exception:
            pass
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for _ in range(50):
    store.close()
for t in threads:
    t.join()
"""


def test_store_close_while_other_threads_record_does_not_crash(sqlite_url: str) -> None:
    """Closing a store while other threads record events never kills the process."""
    result = subprocess.run(
        [sys.executable, "-c", _CLOSE_WHILE_IN_USE, sqlite_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
