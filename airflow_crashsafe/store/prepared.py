"""The ledger's per-call statements as libpq prepared statements: text parameters in, text out.

Why: on PostgreSQL every external call costs two store round trips, intent before the send and the
outcome after, and psycopg's general path (a cursor, an adapter per parameter and per column) added
0.2-0.3 ms to each on a CPU that has just waited for a request (``benchmarks/ledger.py``).
psycopg documents ``Connection.pgconn`` for driving libpq directly, so here each statement is
prepared once per connection and then sent with text parameters, its text results read straight
from libpq. Every column such a statement returns must be text (cast it with ``::text``).

:func:`fetch_text` takes the general path (:meth:`Db.fetch_alone`) whenever the fast one does not
apply: another driver (psycopg2, sqlite3), prepared statements turned off (psycopg's
``prepare_threshold=None``, as behind PgBouncer in transaction mode, or the server no longer
knowing the statement), or a parameter that is not text, an integer or None. With a transaction
open on the connection the general path refuses: these statements must commit on their own.

Both paths honour the store's timeouts (:mod:`~airflow_crashsafe.store.timeouts`): the server's
``statement_timeout`` cancels a statement stuck behind a lock, and the fast path's own wait ends
at the client deadline when the server does not answer at all; either is a clear ``StoreError``.
"""

from __future__ import annotations

import functools
import os
import re
import select
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe import config
from airflow_crashsafe.store.dbapi import NAMED_PARAM, Db
from airflow_crashsafe.store.timeouts import timeout_error

__all__ = ["fetch_text", "send_and_wait"]

_INT8_OID = 20  # integers are declared bigint; the server casts them where a column is narrower
_UNKNOWN_OID = 0  # text and NULL: the server infers the type from where the parameter is used
# Errors after which a prepared statement cannot be used again as it is: it no longer exists on the
# server connection (a pooler switched connections) or its result type changed under it.
_FORGET_PREPARED = {"26000", "0A000"}

Rows = list[tuple[str | None, ...]]


@dataclass(frozen=True)
class _Shape:
    """A statement rewritten for libpq: ``%(name)s`` → ``$n``, and the names in ``$n`` order."""

    text: bytes
    names: tuple[str, ...]


@functools.lru_cache(maxsize=64)
def _shape(sql: str) -> _Shape:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _Shape(NAMED_PARAM.sub(number, sql).replace("%%", "%").encode(), tuple(names))


def fetch_text(db: Db, sql: str, params: Mapping[str, Any]) -> Rows:
    """Run ``sql`` as its own transaction in one round trip; its rows, every value text or None."""
    try:
        return _fetch_text(db, sql, params)
    except Exception as exc:
        error = timeout_error(db, exc)
        if error is not None:
            raise error from exc
        raise


def _fetch_text(db: Db, sql: str, params: Mapping[str, Any]) -> Rows:
    raw = db.raw
    pgconn = getattr(raw, "pgconn", None)
    if pgconn is None or db.prepared is None or getattr(raw, "prepare_threshold", 0) is None:
        return _general(db, sql, params)
    from psycopg import pq

    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return _general(db, sql, params)
    shape = _shape(sql)
    encoded: list[bytes | None] = []
    oids: list[int] = []
    for value in (params[name] for name in shape.names):
        if value is None or type(value) is str:
            encoded.append(value if value is None else value.encode())
            oids.append(_UNKNOWN_OID)
        elif type(value) is int:
            encoded.append(str(value).encode())
            oids.append(_INT8_OID)
        else:
            return _general(db, sql, params)
    types = tuple(oids)
    with raw.lock:
        name = db.prepared.get((sql, types))
        if name is None:
            name = f"crashsafe_{len(db.prepared) + 1}".encode()
            _check(send_and_wait(db, lambda: pgconn.send_prepare(name, shape.text, param_types=types)))
            db.prepared[(sql, types)] = name
        result = send_and_wait(db, lambda: pgconn.send_query_prepared(name, encoded))
    try:
        _check(result)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) not in _FORGET_PREPARED:
            raise
        db.prepared = None  # the failed statement changed nothing; say no to this path from now on
        return _general(db, sql, params)
    return [
        tuple(None if value is None else value.decode() for value in row)
        for row in ([result.get_value(r, c) for c in range(result.nfields)] for r in range(result.ntuples))
    ]


def _general(db: Db, sql: str, params: Mapping[str, Any]) -> Rows:
    return [
        tuple(None if value is None else str(value) for value in row) for row in db.fetch_alone(sql, params)
    ]


def send_and_wait(db: Db, send: Any) -> Any:
    """Send with ``send()`` and wait for the one result; a wait cut short closes the connection.

    The wait spins for up to ``[crashsafe] ledger_spin_wait_ms`` before it sleeps: a local server
    answers well within that, and on a virtual machine a CPU that went idle runs the next few
    hundred microseconds of code measurably slower (``benchmarks/ledger.py`` shows 0.1-0.2 ms per
    call). Set it to 0 to always sleep.

    An exception while waiting (a signal handler raising, the server going away) leaves the
    statement's answer unread on the wire, and the connection unusable: it is closed, so the store
    opens a new one at its next use. The statement itself commits or not on the server either way.
    On a store connection the wait ends with a ``StoreError`` at the store's client deadline.
    """
    pgconn = db.raw.pgconn
    spin_seconds = config.ledger_spin_wait_ms() / 1000.0
    timeouts = db.timeouts
    deadline = None if timeouts is None else time.monotonic() + timeouts.client_deadline()

    def wait_ms() -> int | None:
        if deadline is None or timeouts is None:
            return None
        left = deadline - time.monotonic()
        if left <= 0:
            raise timeouts.unanswered_error()
        return max(1, int(left * 1000))

    try:
        send()
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN)
        while pgconn.flush():  # non-blocking connection: 1 while part of the message is unsent
            poller.modify(pgconn.socket, select.POLLIN | select.POLLOUT)
            poller.poll(wait_ms())
        poller.modify(pgconn.socket, select.POLLIN)
        _yield_cpu()
        first = None
        spin_until = time.perf_counter() + spin_seconds
        while True:
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    return first
                first = first if first is not None else result
            # Stay on the CPU for a short while before sleeping: poll(0) returns at once (and lets
            # other threads run); the process only sleeps once the answer is slower than that.
            poller.poll(0 if time.perf_counter() < spin_until else wait_ms())
    except BaseException:
        db.close()
        raise


def _yield_cpu() -> None:
    """Let a server process woken on this CPU run now (Linux's affine wake-up of a socket reader).

    A local PostgreSQL backend that our write woke usually waits on this CPU's run queue until we
    sleep; yielding once lets it answer while the CPU is still warm, instead of after the spin.
    Measured with the benchmark's operator path: 0.06-0.11 ms less per call than spinning alone.
    With the store on another host this costs one system call and changes nothing.
    """
    if _SCHED_YIELD is not None:
        _SCHED_YIELD()


_SCHED_YIELD = getattr(os, "sched_yield", None)  # not on Windows


def _check(result: Any) -> None:
    """Raise the exception psycopg itself raises for an error ``result``."""
    import psycopg
    from psycopg import pq

    if result is None:
        raise psycopg.OperationalError("the server sent no result")
    if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        raise psycopg.errors.error_from_result(result)
