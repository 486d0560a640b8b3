"""Open MySQL/MariaDB, DuckDB and Snowflake targets as :class:`~airflow_crashsafe.store.dbapi.Db`.

MySQL/MariaDB comes through the connection's ``MySqlHook`` (mysqlclient, or mysql-connector-python
with the extra ``client``; both ``%(name)s``, driven alike by :mod:`.mysql_clients`), with
autocommit off so that a fenced write is one transaction, at READ COMMITTED (see
:func:`_mysql_db`); a statement is cancelled from a second connection (``KILL QUERY``), since the
protocol has no cancel request.

A ``duckdb`` connection names its file in its host, ``schema`` or extra ``path``; it is opened by
the DuckDB provider's ``DuckDBHook`` (``airflow-crashsafe[duckdb]``), so the extra's extensions,
``memory_limit``, ``threads`` and ``settings`` apply, and with the ``duckdb`` library directly
when that provider is not installed. A DuckDB "cursor" is a second connection with transactions
of its own, so :class:`DuckDbConnection` hands out cursors that run on the one connection the
fenced transaction was opened on.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.store.dbapi import DUCKDB, MYSQL, SNOWFLAKE, Db
from airflow_crashsafe.store.mysql_clients import check_client, connect_client, mysql_connection

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook
    from airflow.sdk import Connection

__all__ = [
    "DuckDbConnection",
    "duckdb_from_connection",
    "duckdb_from_url",
    "mysql_from_hook",
    "mysql_from_url",
    "snowflake_from_hook",
    "snowflake_from_url",
]


def _mysql_db(connect: Callable[[], Any]) -> Db:
    raw = mysql_connection(connect())
    raw.autocommit(False)
    # PostgreSQL's default isolation. At InnoDB's REPEATABLE READ, a partition DELETE takes gap
    # locks, and two attempts overwriting one partition deadlock; at READ COMMITTED the later one
    # waits for the earlier one's rows. The fence check reads the latest row in either level.
    raw.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    thread_id = int(raw.thread_id())
    multi_statements = 1 << 16  # CLIENT_MULTI_STATEMENTS: both clients set it unless told not to

    def cancel() -> None:
        # KILL QUERY stops the statement, not the connection; the transaction then rolls back.
        killer = mysql_connection(connect())
        try:
            killer.cursor().execute(f"KILL QUERY {thread_id}")
        finally:
            killer.close()

    db = Db(raw, MYSQL, canceller=cancel)
    db.multi_statements = bool(int(getattr(raw, "client_flag", 0)) & multi_statements)
    # MariaDB 10.1+ runs anonymous compound statements (its version came with the handshake).
    db.compound_statements = db.multi_statements and "mariadb" in str(raw.get_server_info()).lower()
    return db


def mysql_from_url(url: str) -> Db:
    """``mysql://user:pass@host:port/db`` (or ``mariadb://``) opened with mysqlclient, or with
    mysql-connector-python given ``?client=mysql-connector-python`` (as a connection's extra)."""
    parts = urlsplit(url)
    database = unquote(parts.path.lstrip("/"))
    if not database:
        raise ConfigurationError(f"MySQL URL {url!r} names no database; write mysql://user@host:3306/db")
    query = dict(parse_qsl(parts.query))
    client = check_client(query.get("client"), f"The URL {parts.scheme}://{parts.hostname}/{database}")
    host, port = parts.hostname or "127.0.0.1", parts.port or 3306
    user, password = unquote(parts.username or "root"), unquote(parts.password or "")

    def connect() -> Any:
        return connect_client(client, host=host, port=port, user=user, password=password, database=database)

    return _mysql_db(connect)


def mysql_from_hook(hook: DbApiHook) -> Db:
    """The connection's own ``MySqlHook.get_conn()``, autocommit off, either client."""
    conn = getattr(hook, "connection", None) or hook.get_connection(hook.get_conn_id())  # as get_conn()
    check_client((conn.extra_dejson or {}).get("client"), f"Connection {hook.get_conn_id()!r}")
    return _mysql_db(hook.get_conn)


class _DuckDbCursor:
    """A DB-API cursor over the one DuckDB connection (a DuckDB cursor would be another one)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._result: Any = None
        self.rowcount = -1

    @property
    def description(self) -> Any:
        return None if self._result is None else self._result.description

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> _DuckDbCursor:
        args: Any = params if params else None
        if isinstance(args, Mapping):  # DuckDB refuses a named value the statement does not use
            args = {k: v for k, v in args.items() if f"${k}" in sql}
        self._result = self._conn.execute(sql, args) if args is not None else self._conn.execute(sql)
        self.rowcount = int(getattr(self._conn, "rowcount", -1))
        return self

    def executemany(self, sql: str, seq: Sequence[Any]) -> None:
        self._conn.executemany(sql, list(seq))
        self.rowcount = len(seq)

    def fetchone(self) -> Any:
        return self._result.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._result.fetchall())

    def close(self) -> None:
        self._result = None


# One lock per DuckDB file, shared by its connections in this process (the only process that
# can write to it): a write transaction holds it from BEGIN to its end, as SQLite's write lock.
_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()
WRITE_LOCK_TIMEOUT_SECONDS = 120.0


def _write_lock(path: str) -> threading.Lock:
    key = path if path == ":memory:" else os.path.realpath(path)
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


class DuckDbConnection:
    """One DuckDB connection with the DB-API surface :class:`Db` uses, and its file's write lock.

    DuckDB has optimistic concurrency and no row locks; a transaction that began before another
    one updated the fence row still "updates" its old version and commits, losing the update
    instead of failing it. So the writers of one file take turns (:meth:`acquire_write_lock`).
    """

    def __init__(self, conn: Any, path: str) -> None:
        self.conn = conn
        self.path = path
        self._lock = _write_lock(path)

    def acquire_write_lock(self) -> None:
        if not self._lock.acquire(timeout=WRITE_LOCK_TIMEOUT_SECONDS):
            raise TimeoutError(
                f"DuckDB file {self.path}: another fenced write held it for over "
                f"{WRITE_LOCK_TIMEOUT_SECONDS:.0f} s; retry the task."
            )

    def release_write_lock(self) -> None:
        self._lock.release()

    @contextlib.contextmanager
    def write_lock(self) -> Iterator[None]:
        self.acquire_write_lock()
        try:
            yield
        finally:
            self.release_write_lock()

    def cursor(self) -> _DuckDbCursor:
        return _DuckDbCursor(self.conn)

    def execute(self, sql: str, params: Any = None) -> _DuckDbCursor:
        return self.cursor().execute(sql, params)

    def rollback_if_open(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except Exception as exc:  # no transaction is active
            if "no transaction" not in str(exc):
                raise

    def interrupt(self) -> None:
        self.conn.interrupt()

    def close(self) -> None:
        self.conn.close()


def _duckdb(path: str) -> Db:
    import duckdb

    return Db(DuckDbConnection(duckdb.connect(path), path), DUCKDB)


def duckdb_from_url(url: str) -> Db:
    """``duckdb:////abs/path.duckdb`` (or ``duckdb:///:memory:``)."""
    path = unquote(urlsplit(url).path)[1:]
    if not path:
        raise ConfigurationError(f"DuckDB URL {url!r} names no file; write duckdb:////absolute/path.duckdb")
    return _duckdb(path)


def duckdb_from_connection(conn: Connection, conn_id: str) -> Db:
    """A ``duckdb`` Airflow connection: the file in its host, ``schema`` or extra ``path``.

    The file is passed to ``DuckDBHook`` as its ``database``: the hook alone would read
    ``duckdb:////abs/path.duckdb`` (the path lands in ``schema``, its MotherDuck database) as an
    in-memory database, and a fenced write must never land in one that vanishes with the task.
    """
    path = conn.host or (conn.extra_dejson or {}).get("path") or conn.schema
    if not path:
        raise ConfigurationError(
            f"DuckDB connection {conn_id!r} names no file; use duckdb:////absolute/path.duckdb "
            "(or put the path in the connection's host)."
        )
    try:
        from airflow.providers.duckdb.hooks.duckdb import DuckDBHook
    except ImportError:
        return _duckdb(str(path))
    hook = DuckDBHook(duckdb_conn_id=conn_id, database=str(path))
    return Db(DuckDbConnection(hook.get_conn(), str(path)), DUCKDB)


def _snowflake_db(connect: Callable[[], Any]) -> Db:
    """A Snowflake connection with autocommit off: a fenced write is one explicit transaction.

    Snowflake opens a transaction at the first DML statement and commits the open one implicitly
    before any DDL (the refusals in ``sql/plans/portable.py`` keep DDL out of a fenced write).
    Cancelling runs ``SYSTEM$CANCEL_ALL_QUERIES`` for this session from a second connection.
    """
    raw = connect()
    raw.autocommit(False)
    session_id = raw.session_id

    def cancel() -> None:
        other = connect()
        try:
            other.cursor().execute("SELECT SYSTEM$CANCEL_ALL_QUERIES(%(s)s)", {"s": session_id})
        finally:
            other.close()

    return Db(raw, SNOWFLAKE, canceller=cancel)


def snowflake_from_hook(hook: DbApiHook) -> Db:
    """The connection's own ``SnowflakeHook.get_conn()`` (snowflake-connector-python), autocommit off."""
    return _snowflake_db(hook.get_conn)


def snowflake_from_url(url: str) -> Db:
    """``snowflake://user:pass@account/database/schema?warehouse=..&host=..&port=..&protocol=..``.

    For tests, benchmarks and the drill; tasks open Snowflake through their connection's hook.
    """
    import snowflake.connector

    parts = urlsplit(url)
    path = [unquote(p) for p in parts.path.strip("/").split("/") if p]
    if len(path) != 2:
        raise ConfigurationError(
            f"Snowflake URL {url!r} must name a database and a schema: snowflake://user:pass@account/db/schema"
        )
    kwargs: dict[str, Any] = {
        "account": parts.hostname,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "database": path[0],
        "schema": path[1],
        **dict(parse_qsl(parts.query)),
    }
    if "port" in kwargs:
        kwargs["port"] = int(kwargs["port"])
    return _snowflake_db(lambda: snowflake.connector.connect(**kwargs))
