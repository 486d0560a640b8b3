"""The ledger's per-call statements as libpq prepared statements: text parameters in, text out.

Why: on PostgreSQL every external call costs two store round trips, intent before the send and the
outcome after, and psycopg's general path (a cursor, an adapter per parameter and per column) adds
about 0.1 ms to each on a CPU that has just waited for a request (``benchmarks/ledger.py``).
psycopg documents ``Connection.pgconn`` for driving libpq directly, so here each statement is
prepared once per connection and then sent with text parameters, its text results read straight
from libpq. Every column such a statement returns must be text (cast it with ``::text``).

:func:`fetch_text` takes the general path (:meth:`Db.fetch_alone`) whenever the fast one does not
apply: another driver (psycopg2, sqlite3), a transaction open on the connection, prepared
statements turned off (psycopg's ``prepare_threshold=None``, as behind PgBouncer in transaction
mode, or the server no longer knowing the statement), or a parameter that is not text, an integer
or None.
"""

from __future__ import annotations

import functools
import re
import select
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.store.dbapi import Db

__all__ = ["fetch_text"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
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

    return _Shape(_PLACEHOLDER.sub(number, sql).replace("%%", "%").encode(), tuple(names))


def fetch_text(db: Db, sql: str, params: Mapping[str, Any]) -> Rows:
    """Run ``sql`` as its own transaction in one round trip; its rows, every value text or None."""
    raw = db.raw
    pgconn = getattr(raw, "pgconn", None)
    if pgconn is None or db.prepared is None or getattr(raw, "prepare_threshold", 0) is None:
        return _general(db, sql, params)
    from psycopg import pq

    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return _general(db, sql, params)
    shape = _shape(sql)
    values = [params[name] for name in shape.names]
    if any(value is not None and type(value) not in (str, int) for value in values):
        return _general(db, sql, params)
    types = tuple(_INT8_OID if type(value) is int else _UNKNOWN_OID for value in values)
    with raw.lock:
        name = db.prepared.get((sql, types))
        if name is None:
            name = f"crashsafe_{len(db.prepared) + 1}".encode()
            _check(_run(db, lambda: pgconn.send_prepare(name, shape.text, param_types=types)))
            db.prepared[(sql, types)] = name
        encoded = [None if value is None else str(value).encode() for value in values]
        result = _run(db, lambda: pgconn.send_query_prepared(name, encoded))
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


def _run(db: Db, send: Any) -> Any:
    """Send with ``send()`` and wait for the one result; a wait cut short closes the connection.

    An exception while waiting (a signal handler raising, the server going away) leaves the
    statement's answer unread on the wire, and the connection unusable: it is closed, so the store
    opens a new one at its next use. The statement itself commits or not on the server either way.
    """
    pgconn = db.raw.pgconn
    try:
        send()
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN)
        while pgconn.flush():  # non-blocking connection: 1 while part of the message is unsent
            poller.modify(pgconn.socket, select.POLLIN | select.POLLOUT)
            poller.poll()
        poller.modify(pgconn.socket, select.POLLIN)
        first = None
        while True:
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    return first
                first = first if first is not None else result
            poller.poll()
    except BaseException:
        db.close()
        raise


def _check(result: Any) -> None:
    """Raise the exception psycopg itself raises for an error ``result``."""
    import psycopg
    from psycopg import pq

    if result is None:
        raise psycopg.OperationalError("the server sent no result")
    if result.status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
        raise psycopg.errors.error_from_result(result)
