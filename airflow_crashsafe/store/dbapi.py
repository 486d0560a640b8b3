"""One DB-API connection plus the few facts about its database that crashsafe's SQL depends on.

crashsafe writes its own SQL once, with ``%(name)s`` placeholders, and this layer adapts it to the
driver (psycopg 2/3 take it as is; sqlite3 wants ``:name``). Connections come from Airflow
connections (hooks own them) or, for tests, benchmarks and the drill, straight from a URL.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_crashsafe.errors import ConfigurationError

__all__ = ["Db", "Dialect", "connect_target", "connect_url", "sqlite_path_from_url"]

_NAMED_PARAM = re.compile(r"%\((\w+)\)s")
SQLITE_BUSY_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Dialect:
    """What differs between the databases crashsafe supports."""

    name: str  # "postgresql" | "sqlite"

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgresql"

    def adapt(self, sql: str) -> str:
        """Rewrite crashsafe's ``%(name)s`` placeholders for this driver."""
        if self.is_postgres:
            return sql
        return _NAMED_PARAM.sub(r":\1", sql).replace("%%", "%")


POSTGRES = Dialect("postgresql")
SQLITE = Dialect("sqlite")


class Db:
    """A DB-API connection that crashsafe drives in explicit transactions."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self.raw = raw
        self.dialect = dialect
        self._in_transaction = False
        self._hot_cursor: Any = None
        # Statements prepared on this connection by store/prepared.py; None: do not prepare here.
        self.prepared: dict[tuple[str, tuple[int, ...]], bytes] | None = {}

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        """Run one of crashsafe's own statements; returns the cursor."""
        cursor = self.raw.cursor()
        cursor.execute(self.dialect.adapt(sql), dict(params or {}))
        return cursor

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[None]:
        """Each statement inside is its own transaction (no separate COMMIT round trip)."""
        if not self.dialect.is_postgres:
            yield  # sqlite3 with isolation_level=None autocommits outside BEGIN
            return
        self.raw.autocommit = True
        try:
            yield
        finally:
            self.raw.autocommit = False

    def execute_alone(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        """Run one statement as its own transaction in a single round trip."""
        with self.autocommit():
            return self.execute(sql, params)

    def fetch_alone(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """:meth:`execute_alone` for the ledger's per-call statements: the rows, on a reused cursor.

        A new psycopg cursor per statement costs about 0.1 ms after the process has waited on a
        request (measured in ``benchmarks/ledger.py``); the ledger pays two per external call.
        """
        if self._hot_cursor is None:
            self._hot_cursor = self.raw.cursor()
        with self.autocommit():
            self._hot_cursor.execute(self.dialect.adapt(sql), params or {})
            return self._hot_cursor.fetchall() if self._hot_cursor.description is not None else []

    def begin(self, *, immediate: bool = True) -> None:
        """Open a transaction.

        On SQLite, ``immediate`` takes the database's single write lock now, so a short
        read-then-write transaction cannot fail to upgrade; a long write passes ``False`` so that
        other attempts can still take tokens until its first write.
        """
        if self.dialect.is_postgres:
            # psycopg opens a transaction implicitly at the first statement.
            self._in_transaction = True
            return
        self.raw.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        self._in_transaction = True

    def commit(self) -> None:
        self.raw.commit() if self.dialect.is_postgres else self.raw.execute("COMMIT")
        self._in_transaction = False

    def rollback(self) -> None:
        if self.dialect.is_postgres:
            self.raw.rollback()
        elif self.raw.in_transaction:
            self.raw.execute("ROLLBACK")
        self._in_transaction = False

    def driver_server_version(self) -> int:
        """PostgreSQL's ``server_version_num`` as the driver learnt it at connect (no round trip)."""
        info = getattr(self.raw, "info", None)  # psycopg 3
        version = getattr(info, "server_version", None) or getattr(self.raw, "server_version", 0)
        return int(version or 0)

    def is_broken(self) -> bool:
        """True when the server side of the connection is gone (closed, terminated, failed over)."""
        if not self.dialect.is_postgres:
            return False
        return bool(getattr(self.raw, "broken", False) or getattr(self.raw, "closed", False))

    def cancel(self) -> None:
        """Cancel the statement running on this connection; safe from a signal handler."""
        if self.dialect.is_postgres:
            self.raw.cancel()
        else:
            self.raw.interrupt()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a broken connection must not hide what broke it
            self.raw.close()


def _sqlite(path: str) -> Db:
    raw = sqlite3.connect(
        path, timeout=SQLITE_BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
    )
    _enable_wal(raw)
    raw.execute("PRAGMA synchronous=NORMAL")
    return Db(raw, SQLITE)


def _enable_wal(raw: sqlite3.Connection) -> None:
    """Switch a SQLite file to WAL once; many processes opening a fresh file at once must not fail.

    Changing the journal mode needs an exclusive lock and SQLite answers "database is locked" at
    once, without its busy handler, while another connection holds one: so wait and retry.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_SECONDS
    while True:
        try:
            if str(raw.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                raw.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _postgres_from_url(url: str) -> Db:
    import psycopg

    dsn = re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)
    return Db(psycopg.connect(dsn, autocommit=False), POSTGRES)


def sqlite_path_from_url(url: str) -> str:
    """``sqlite:////abs/path`` or ``sqlite:///rel/path`` → the file path."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigurationError(f"SQLite URL {url!r} has a host; write sqlite:////absolute/path.db")
    path = unquote(parts.path)[1:]  # "sqlite:///rel.db" -> "rel.db", "sqlite:////abs.db" -> "/abs.db"
    if not path:
        raise ConfigurationError(f"SQLite URL {url!r} names no file; write sqlite:////absolute/path.db")
    return path


def connect_url(url: str) -> Db:
    """Open ``postgresql://…`` or ``sqlite:///…`` directly (tests, benchmarks, the drill)."""
    scheme = url.split(":", 1)[0].lower()
    if scheme.startswith("postgres"):
        return _postgres_from_url(url)
    if scheme == "sqlite":
        return _sqlite(sqlite_path_from_url(url))
    raise ConfigurationError(
        f"Unsupported database URL scheme {scheme!r}: crashsafe writes to PostgreSQL "
        "(postgresql://…) or SQLite (sqlite:////path.db)."
    )


def connect_target(conn_id: str) -> Db:
    """Open the Airflow connection ``conn_id`` (PostgreSQL through its hook, or SQLite)."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise ConfigurationError(
            f"Airflow connection {conn_id!r} could not be loaded ({exc}); create it "
            f"(e.g. AIRFLOW_CONN_{conn_id.upper()}=postgresql://user:pass@host:5432/db)."
        ) from exc
    conn_type = (conn.conn_type or "").lower()
    if conn_type in {"postgres", "postgresql"}:
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        raw: Any = PostgresHook(postgres_conn_id=conn_id).get_conn()
        raw.autocommit = False
        return Db(raw, POSTGRES)
    if conn_type == "sqlite":
        path = conn.host or (conn.extra_dejson or {}).get("path") or conn.schema
        if not path:
            raise ConfigurationError(
                f"SQLite connection {conn_id!r} names no file; use sqlite:////absolute/path.db."
            )
        return _sqlite(path)
    raise ConfigurationError(
        f"Connection {conn_id!r} has type {conn_type!r}; crashsafe's fenced writes support "
        "PostgreSQL (postgres) and SQLite (sqlite) connections."
    )
