"""The store's connect and statement timeouts: a hung store fails the task with a clear StoreError."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from airflow_crashsafe.effects import effect
from airflow_crashsafe.errors import StoreError
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import ledger, open_store
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.prepared import fetch_text
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.store.timeouts import StoreTimeouts
from airflow_crashsafe.testing import fake_context
from tests.support.faulty import BlackholeProxy

pytestmark = pytest.mark.integration

SLOT = Slot("timeouts_dag", "load", -1, "2024-01-02T00:00:00+00:00")
ATTEMPT = Attempt(try_number=1, ti_id="ti-1", run_id="run", clear_number=0)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for conn in accepted:
            conn.close()


@contextmanager
def events_locked(url: str, table: str = "crashsafe_events") -> Iterator[None]:
    """Another session holds an exclusive lock on ``table`` inside the block."""
    holder = connect_url(url)
    try:
        holder.begin()
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        holder.rollback()
        holder.close()


def test_effect_fails_within_the_connect_timeout_on_a_store_that_never_answers(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """effect() against a store that accepts and stays silent fails with StoreError within the timeout."""
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", f"postgresql://u:p@127.0.0.1:{silent_server}/db")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__STORE_CONNECT_TIMEOUT_SECONDS", "2")
    started = time.monotonic()
    context = fake_context(dag_id="d", task_id="t", try_number=1)
    with (
        pytest.raises(StoreError, match=r"did not accept a connection within 2 s") as caught,
        effect("silent-store", context=context),
    ):
        pytest.fail("the block must not run without the ledger")
    assert time.monotonic() - started < 10
    assert "crashsafe_default" in str(caught.value)
    assert "store_connect_timeout_seconds" in str(caught.value)


def test_statement_timeout_fires_behind_a_lock_on_postgres(postgres_url: str) -> None:
    """A statement waiting on another session's lock ends at the statement timeout as a StoreError."""
    store = Store(lambda: connect_url(postgres_url), postgres_url, timeouts=StoreTimeouts(5, 0.5, "store X"))
    try:
        store.record_event("committed", SLOT, "t", ATTEMPT)
        started = time.monotonic()
        with events_locked(postgres_url):
            with pytest.raises(StoreError, match=r"store X did not finish a statement within 0.5 s"):
                store.events()
            with pytest.raises(StoreError, match=r"within 0.5 s"), store.transaction() as db:
                db.execute("SELECT pg_sleep(5)")
        assert time.monotonic() - started < 4
        assert len(store.events()) == 1  # the store works again once the lock is gone
    finally:
        store.close()


def test_prepared_fast_path_honours_the_statement_timeout(postgres_url: str) -> None:
    """The ledger's prepared statements end at the statement timeout too, with the same StoreError."""
    store = Store(lambda: connect_url(postgres_url), postgres_url, timeouts=StoreTimeouts(5, 0.5, "store Y"))
    try:
        db = store.connection()
        assert fetch_text(db, "SELECT %(v)s::text", {"v": "ok"}) == [("ok",)]
        assert db.prepared  # the fast path is the one in use
        started = time.monotonic()
        with (
            events_locked(postgres_url),
            pytest.raises(StoreError, match=r"store Y did not finish a statement within 0.5 s"),
        ):
            fetch_text(db, "SELECT count(*)::text FROM crashsafe_events WHERE kind = %(k)s", {"k": "x"})
        assert time.monotonic() - started < 4
    finally:
        store.close()


def test_sqlite_store_busy_timeout_is_the_statement_timeout(sqlite_url: str) -> None:
    """On SQLite a write waiting for another connection's lock ends at the timeout as a StoreError."""
    store = Store(lambda: connect_url(sqlite_url), sqlite_url, timeouts=StoreTimeouts(5, 0.3, "store Z"))
    store.migrate()
    holder = connect_url(sqlite_url)
    try:
        holder.begin(immediate=True)
        started = time.monotonic()
        with pytest.raises(StoreError, match=r"store Z did not finish a statement within 0.3 s"):
            store.record_event("committed", SLOT, "t", ATTEMPT)
        assert time.monotonic() - started < 3
    finally:
        holder.rollback()
        holder.close()
        store.close()


def test_configured_store_reads_the_timeouts(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_store() bounds its statements by [crashsafe] store_statement_timeout_seconds."""
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__STORE_STATEMENT_TIMEOUT_SECONDS", "7.5")
    with open_store().transaction() as db:
        assert db.execute("SHOW statement_timeout").fetchone()[0] == "7500ms"


def test_ledger_reads_outside_a_transaction_end_as_a_store_error(postgres_url: str) -> None:
    """Autocommitted ledger reads (in-flight poll, lookup) behind a lock: StoreError, not the driver's."""
    store = Store(lambda: connect_url(postgres_url), postgres_url, timeouts=StoreTimeouts(5, 0.5, "store L"))
    try:
        db = store.connection()
        reads: list[Callable[[], Any]] = [
            lambda: ledger.in_flight(db, "k"),
            lambda: ledger.get_entry(db, "k"),
            lambda: db.fetch_alone("SELECT count(*) FROM crashsafe_ledger", {}),
        ]
        with events_locked(postgres_url, "crashsafe_ledger"):
            for read in reads:
                started = time.monotonic()
                with pytest.raises(StoreError) as caught, db.autocommit():
                    read()
                assert time.monotonic() - started < 3
                message = str(caught.value)
                assert message.startswith("store L did not finish a statement within 0.5 s")
                assert "store_statement_timeout_seconds" in message
        with db.autocommit():
            assert ledger.in_flight(db, "k") is None  # the same connection works once the lock is gone
    finally:
        store.close()


@pytest.fixture
def proxied(postgres_url: str) -> Iterator[tuple[str, BlackholeProxy]]:
    """``postgres_url`` through a TCP proxy that the test can blackhole; (url, proxy)."""
    parts = urlsplit(postgres_url)
    proxy = BlackholeProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    netloc = parts.netloc.rsplit("@", 1)
    auth = f"{netloc[0]}@" if len(netloc) == 2 else ""
    try:
        yield urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{proxy.port}")), proxy
    finally:
        proxy.close()


def test_store_hung_mid_query_fails_at_the_client_deadline(proxied: tuple[str, BlackholeProxy]) -> None:
    """A store that answered the start-up, then went silent: each path ends at the client deadline."""
    url, proxy = proxied
    timeouts = StoreTimeouts(2, 1, "store H")  # client deadline: 1 + 2 = 3 s
    store = Store(lambda: connect_url(url, link=timeouts.link_params()), url, timeouts=timeouts)
    try:
        store.record_event("committed", SLOT, "t", ATTEMPT)
        assert fetch_text(store.connection(), "SELECT %(v)s::text", {"v": "ok"}) == [("ok",)]
        paths: list[tuple[str, Callable[[], Any]]] = [
            ("transaction", store.events),
            ("autocommit", lambda: store.record_event("committed", SLOT, "t", ATTEMPT)),
            ("ledger read", lambda: ledger.in_flight(store.connection(), "k")),
            ("prepared", lambda: fetch_text(store.connection(), "SELECT %(v)s::text", {"v": "x"})),
        ]
        proxy.blackhole()
        for name, path in paths:
            started = time.monotonic()
            with pytest.raises(StoreError, match=r"^store H did not (answer|finish a statement) within 3 s"):
                path()
            took = time.monotonic() - started
            assert 2.5 < took < 8, f"{name}: {took:.1f} s"
            print(f"{name}: StoreError after {took:.1f} s")
            store.discard_connection()  # the next path opens a connection before the hole
            proxy.blackhole(False)
            store.connection()
            proxy.blackhole()
        proxy.blackhole(False)
        assert len(store.events()) == 1  # works again; the blackholed insert never reached the server
    finally:
        store.close()


def test_store_connections_carry_keepalives(postgres_url: str) -> None:
    """A store connection is opened with TCP keepalives and tcp_user_timeout; a target's is not."""
    timeouts = StoreTimeouts(3, 2, "store K")
    db = connect_url(postgres_url, link=timeouts.link_params())
    plain = connect_url(postgres_url)
    try:
        params = db.raw.info.get_parameters()
        assert params["keepalives"] == "1"
        assert params["keepalives_idle"] == "3"
        assert params["tcp_user_timeout"] == "5000"
        assert params["connect_timeout"] == "3"
        assert "keepalives" not in plain.raw.info.get_parameters()
    finally:
        db.close()
        plain.close()
