"""One DB-API connection plus the few facts about its database that crashsafe's SQL depends on.

crashsafe writes its own SQL once, with ``%(name)s`` placeholders, and this layer adapts it to the
driver (psycopg 2/3 and MySQLdb take it as is; sqlite3 wants ``:name``, DuckDB ``$name``).
Connections come from Airflow connections, opened by the connection's own SQL hook
(``DbApiHook``) as ``common.sql`` does, or, for tests, benchmarks and the drill, straight from a URL.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from airflow_crashsafe.errors import ConfigurationError, StoreError
from airflow_crashsafe.store.client_deadline import armed, cut_socket
from airflow_crashsafe.store.mysql_clients import rollback_left_changes

if TYPE_CHECKING:
    from airflow.providers.common.sql.hooks.sql import DbApiHook
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook
    from airflow.sdk import Connection

    from airflow_crashsafe.store.timeouts import StoreTimeouts

__all__ = [
    "NAMED_PARAM",
    "STORE_CONN_TYPE",
    "Db",
    "Dialect",
    "connect_hook",
    "connect_target",
    "connect_url",
    "get_sql_hook",
    "sqlite_path_from_url",
]

#: crashsafe's own placeholders, ``%(name)s``; group 1 is the name.
NAMED_PARAM = re.compile(r"%\((\w+)\)s")
SQLITE_BUSY_TIMEOUT_SECONDS = 120.0
#: Connection type of :class:`airflow_crashsafe.hooks.CrashsafeHook`: a crashsafe store on PostgreSQL.
STORE_CONN_TYPE = "crashsafe"
_SUPPORTED = (
    "PostgreSQL (conn_type postgres), SQLite (sqlite), MySQL/MariaDB (mysql), DuckDB (duckdb) and "
    "Snowflake (snowflake)"
)


@dataclass(frozen=True)
class Dialect:
    """What differs between the databases crashsafe supports."""

    name: str  # "postgresql" | "sqlite" | "mysql" | "duckdb" | "snowflake"

    @property
    def is_postgres(self) -> bool:
        return self.name == "postgresql"

    @property
    def is_mysql(self) -> bool:
        return self.name == "mysql"

    @property
    def is_duckdb(self) -> bool:
        return self.name == "duckdb"

    @property
    def is_snowflake(self) -> bool:
        return self.name == "snowflake"

    @property
    def has_client_autocommit(self) -> bool:
        """Autocommit is switched with the connection's ``autocommit(bool)`` (MySQLdb, Snowflake)."""
        return self.name in ("mysql", "snowflake")

    @property
    def has_server_transactions(self) -> bool:
        """The driver opens a transaction at the first statement (PostgreSQL, MySQL, Snowflake)."""
        return self.name in ("postgresql", "mysql", "snowflake")

    def adapt(self, sql: str) -> str:
        """Rewrite crashsafe's ``%(name)s`` placeholders for this driver."""
        if self.has_server_transactions:
            return sql
        return _rewritten(sql, r"$\1" if self.is_duckdb else r":\1")


@functools.lru_cache(maxsize=512)
def _rewritten(sql: str, style: str) -> str:
    """``sql`` with its placeholders in ``style``: crashsafe runs the same few statements all the
    time, and the rewrite cost more than SQLite's own insert of an event."""
    return NAMED_PARAM.sub(style, sql).replace("%%", "%")


POSTGRES = Dialect("postgresql")
SQLITE = Dialect("sqlite")
MYSQL = Dialect("mysql")
DUCKDB = Dialect("duckdb")
SNOWFLAKE = Dialect("snowflake")


class Db:
    """A DB-API connection that crashsafe drives in explicit transactions."""

    def __init__(self, raw: Any, dialect: Dialect, *, canceller: Any = None) -> None:
        self.raw = raw
        self.dialect = dialect
        # MySQL, Snowflake: cancels the running statement from a second connection.
        self._canceller = canceller
        self._in_transaction = False
        self._hot_cursor: Any = None
        # Statements prepared on this connection by store/prepared.py; None: do not prepare here.
        self.prepared: dict[tuple[str, tuple[int, ...]], bytes] | None = {}
        #: Set on the store's connections by ``store.timeouts.apply_store_timeouts``; None on targets.
        self.timeouts: StoreTimeouts | None = None
        #: MySQL/MariaDB through mysqlclient (set by ``store.engines``): statements joined by ``;``
        #: go in one round trip (``multi_statements``), and on MariaDB an anonymous compound
        #: statement (``BEGIN NOT ATOMIC ... END``) can decide whether to COMMIT (``compound_statements``).
        self.multi_statements = False
        self.compound_statements = False
        #: MariaDB (store/mariadb_prepared.py): the statements run on this connection at least once,
        #: and those prepared on it.
        self.sql_used: set[str] = set()
        self.sql_prepared: set[str] = set()
        #: MySQL/MariaDB: the last rollback left changes standing (a table that cannot roll back).
        self.rollback_left_changes = False
        #: Tables ``sql.fenceable`` checked on this connection (name parts -> whether one exists).
        self.checked_tables: dict[tuple[str, ...], bool] = {}

    def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        """Run one of crashsafe's own statements; returns the cursor."""
        cursor = self.raw.cursor()
        with self.bounded():
            cursor.execute(self.dialect.adapt(sql), dict(params or {}))
        return cursor

    def execute_all(self, sql: str, params: Mapping[str, Any], result: int = 0) -> tuple[int, Any]:
        """Run statements sent as one (see ``multi_statements``) and read every result.

        Returns the ``lastrowid`` of result number ``result`` (from 0) and the first row any result
        returned (or None). An error in one statement raises here, and the statements after it do
        not run.
        """
        cursor = self.execute(sql, params)
        lastrowid, row, index = 0, None, 0
        while True:
            if index == result:
                lastrowid = int(cursor.lastrowid or 0)
            if row is None and cursor.description is not None:
                row = cursor.fetchone()
            if not cursor.nextset():
                return lastrowid, row
            index += 1

    def commit_by(self, sql: str, params: Mapping[str, Any]) -> bool:
        """Run a compound statement that ends the open transaction itself: it commits and returns
        1, or leaves the transaction open and returns 0 (the caller then rolls back)."""
        _, row = self.execute_all(sql, params)
        committed = row is not None and int(row[0]) == 1
        if committed:
            self._in_transaction = False
        return committed

    @contextlib.contextmanager
    def bounded(self) -> Iterator[None]:
        """On a store connection: one round trip, bounded and with its timeouts as ``StoreError``.

        The server's statement timeout and SQLite's busy timeout surface as the store's clear
        error; on PostgreSQL a server that does not answer at all is cut off at the client
        deadline (:mod:`~airflow_crashsafe.store.client_deadline`). Target connections
        (``timeouts`` None) are left alone: a fenced write may rightly run for hours.
        """
        timeouts = self.timeouts
        if timeouts is None:
            yield
            return
        deadline = armed(timeouts.client_deadline(), self._cut) if self.dialect.is_postgres else None
        try:
            with deadline or contextlib.nullcontext() as state:
                yield
        except StoreError:
            raise
        except Exception as exc:
            if state is not None and state.fired:
                raise timeouts.unanswered_error(exc) from exc
            error = timeouts.error_for(exc)
            if error is not None:
                raise error from exc
            raise

    def _cut(self) -> None:
        """From the deadline watcher: end this connection's blocked round trip."""
        cut_socket(self.raw.fileno())

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[None]:
        """Each statement inside is its own transaction (no separate COMMIT round trip)."""
        if self.dialect.has_client_autocommit:
            self.raw.autocommit(True)
            try:
                yield
            finally:
                self.raw.autocommit(False)
            return
        if self.dialect.is_duckdb and not self._in_transaction:
            with self.raw.write_lock():  # one writer at a time, as in a transaction (begin())
                yield
            return
        if not self.dialect.is_postgres:
            yield  # sqlite3 with isolation_level=None and DuckDB autocommit outside BEGIN
            return
        self.raw.autocommit = True
        try:
            yield
        finally:
            if not self.is_broken():  # a lost connection refuses it, hiding what broke it
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
        with self.autocommit(), self.bounded():
            self._hot_cursor.execute(self.dialect.adapt(sql), params or {})
            return self._hot_cursor.fetchall() if self._hot_cursor.description is not None else []

    def begin(self, *, immediate: bool = True) -> None:
        """Open a transaction.

        On SQLite, ``immediate`` takes the database's single write lock now, so a short
        read-then-write transaction cannot fail to upgrade; a long write passes ``False`` so that
        other attempts can still take tokens until its first write.
        """
        if self.dialect.has_server_transactions:
            # psycopg and MySQLdb open a transaction implicitly at the first statement.
            self._in_transaction = True
            return
        if self.dialect.is_duckdb:
            # Like SQLite's BEGIN IMMEDIATE: DuckDB has no row locks, and its optimistic
            # concurrency loses a stale commit's fence update instead of failing it, so writers of
            # one file (all in this process: DuckDB lets one process write) take turns.
            self.raw.acquire_write_lock()
            try:
                self.raw.execute("BEGIN TRANSACTION")
            except BaseException:
                self.raw.release_write_lock()
                raise
            self._in_transaction = True
            return
        self.raw.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        self._in_transaction = True

    def commit(self) -> None:
        with self.bounded():
            if self.dialect.is_duckdb:
                try:
                    self.raw.execute("COMMIT")
                finally:
                    self._in_transaction = False
                    self.raw.release_write_lock()
                return
            self.raw.commit() if self.dialect.has_server_transactions else self.raw.execute("COMMIT")
        self._in_transaction = False

    def rollback(self) -> None:
        if self.dialect.has_server_transactions:
            self.raw.rollback()
            if self.dialect.is_mysql:
                self.rollback_left_changes = rollback_left_changes(self.raw)
        elif self.dialect.is_duckdb:
            try:
                self.raw.rollback_if_open()
            finally:
                if self._in_transaction:
                    self.raw.release_write_lock()
        elif self.raw.in_transaction:
            self.raw.execute("ROLLBACK")
        self._in_transaction = False

    def driver_server_version(self) -> int:
        """PostgreSQL's ``server_version_num`` as the driver learnt it at connect (no round trip)."""
        info = getattr(self.raw, "info", None)  # psycopg 3
        version = getattr(info, "server_version", None) or getattr(self.raw, "server_version", 0)
        return int(version or 0)

    def describe(self) -> str:
        """Which database this is, for people: product, version, name and place."""
        if self.dialect.is_mysql:
            version, name = self.raw.get_server_info(), self.execute("SELECT DATABASE()").fetchone()[0]
            return f"MySQL/MariaDB {version} database {name!r} on {self.raw.get_host_info()}"
        if self.dialect.is_snowflake:
            raw = self.raw
            return f"Snowflake database {raw.database!r} schema {raw.schema!r} on {raw.host}:{raw.port}"
        if self.dialect.is_duckdb:
            return f"DuckDB file {self.raw.path}"
        if not self.dialect.is_postgres:
            path = self.raw.execute("PRAGMA database_list").fetchone()[2]
            return f"SQLite {sqlite3.sqlite_version} file {path or ':memory:'}"
        info = getattr(self.raw, "info", None)
        version = self.driver_server_version()
        major, minor = divmod(version, 10000)
        where = f"{getattr(info, 'host', '?')}:{getattr(info, 'port', '?')}"
        return f"PostgreSQL {major}.{minor} database {getattr(info, 'dbname', '?')!r} on {where}"

    def is_broken(self) -> bool:
        """True when the server side of the connection is gone (closed, terminated, failed over)."""
        if self.dialect.is_mysql:
            return not getattr(self.raw, "open", True)
        if self.dialect.is_snowflake:
            return bool(self.raw.is_closed())
        if not self.dialect.is_postgres:
            return False
        return bool(getattr(self.raw, "broken", False) or getattr(self.raw, "closed", False))

    def cancel(self) -> None:
        """Cancel the statement running on this connection; safe from a signal handler."""
        if self.dialect.is_postgres:
            self.raw.cancel()
        elif self._canceller is not None:
            self._canceller()
        else:
            self.raw.interrupt()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a broken connection must not hide what broke it
            self.raw.close()
        if self.dialect.is_duckdb and self._in_transaction:  # closed mid-write: let the next writer in
            self._in_transaction = False
            self.raw.release_write_lock()


def _sqlite(path: str) -> Db:
    # check_same_thread=False: a Store closes the connections of its finished threads from another.
    return Db(_configure_sqlite(sqlite3.connect(path, check_same_thread=False)), SQLITE)


def _configure_sqlite(raw: sqlite3.Connection) -> sqlite3.Connection:
    """Make a fresh sqlite3 connection behave as :class:`Db` expects; all of it can be set after connect.

    ``isolation_level=None``: :meth:`Db.begin` issues BEGIN itself and statements outside one
    autocommit. ``busy_timeout`` is what ``sqlite3.connect(timeout=)`` sets: concurrent attempts
    wait for the single write lock instead of failing. WAL lets readers run beside the writer.
    """
    raw.isolation_level = None
    raw.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_SECONDS * 1000)}")
    _enable_wal(raw)
    raw.execute("PRAGMA synchronous=NORMAL")
    return raw


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


def _postgres_from_url(url: str, link: Mapping[str, Any]) -> Db:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    dsn = re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)
    given = conninfo_to_dict(dsn)
    extra = {key: value for key, value in link.items() if key not in given}
    return Db(psycopg.connect(dsn, autocommit=False, **extra), POSTGRES)


def sqlite_path_from_url(url: str) -> str:
    """``sqlite:////abs/path`` or ``sqlite:///rel/path`` → the file path."""
    parts = urlsplit(url)
    if parts.netloc:
        raise ConfigurationError(f"SQLite URL {url!r} has a host; write sqlite:////absolute/path.db")
    path = unquote(parts.path)[1:]  # "sqlite:///rel.db" -> "rel.db", "sqlite:////abs.db" -> "/abs.db"
    if not path:
        raise ConfigurationError(f"SQLite URL {url!r} names no file; write sqlite:////absolute/path.db")
    return path


def connect_url(url: str, *, connect_timeout: int | None = None, link: Mapping[str, Any] | None = None) -> Db:
    """Open ``postgresql://…``, ``sqlite:///…``, ``mysql://…`` or ``duckdb:///…`` directly (tests,
    benchmarks, the drill).

    ``connect_timeout`` (seconds) and ``link`` (more libpq parameters, e.g. the store's
    keepalives) apply to PostgreSQL unless the URL sets its own.
    """
    scheme = url.split(":", 1)[0].lower()
    if scheme.startswith("postgres"):
        params = dict(link or {})
        if connect_timeout is not None:
            params["connect_timeout"] = connect_timeout
        return _postgres_from_url(url, params)
    if scheme == "sqlite":
        return _sqlite(sqlite_path_from_url(url))
    if scheme in ("mysql", "mariadb"):
        from airflow_crashsafe.store.engines import mysql_from_url

        return mysql_from_url(url)
    if scheme == "duckdb":
        from airflow_crashsafe.store.engines import duckdb_from_url

        return duckdb_from_url(url)
    if scheme == "snowflake":
        from airflow_crashsafe.store.engines import snowflake_from_url

        return snowflake_from_url(url)
    raise ConfigurationError(
        f"Unsupported database URL scheme {scheme!r}: crashsafe writes to PostgreSQL "
        "(postgresql://…), SQLite (sqlite:////path.db), MySQL/MariaDB (mysql://…), DuckDB "
        "(duckdb:////path.duckdb) or Snowflake (snowflake://user:pass@account/db/schema)."
    )


def _load_connection(conn_id: str) -> Connection:
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as exc:
        raise ConfigurationError(
            f"Airflow connection {conn_id!r} could not be loaded ({exc}); create it "
            f"(e.g. AIRFLOW_CONN_{conn_id.upper()}=postgresql://user:pass@host:5432/db)."
        ) from exc


def get_sql_hook(conn_id: str) -> DbApiHook:
    """The Airflow SQL hook of connection ``conn_id``: ``get_connection(conn_id).get_hook()``.

    A ``crashsafe`` connection (the store's own type) is PostgreSQL and gets a ``PostgresHook``.
    """
    return _hook_of(_load_connection(conn_id), conn_id)


def _hook_of(conn: Connection, conn_id: str) -> DbApiHook:
    from airflow.providers.common.sql.hooks.sql import DbApiHook

    conn_type = (conn.conn_type or "").lower()
    if conn_type == STORE_CONN_TYPE:
        from airflow.providers.postgres.hooks.postgres import PostgresHook

        return PostgresHook(postgres_conn_id=conn_id)
    try:
        hook = conn.get_hook()
    except Exception as exc:
        raise ConfigurationError(
            f"Connection {conn_id!r} has type {conn_type!r}, for which no Airflow hook could be "
            f"loaded ({exc}); crashsafe writes to {_SUPPORTED} connections."
        ) from exc
    if not isinstance(hook, DbApiHook):
        raise ConfigurationError(
            f"Connection {conn_id!r} has type {conn_type!r}, whose hook {type(hook).__name__} is not "
            f"a SQL hook (DbApiHook); crashsafe writes to {_SUPPORTED} connections."
        )
    return hook


def connect_hook(hook: DbApiHook) -> Db:
    """Open the database behind a SQL hook with the hook's own ``get_conn()``.

    The dialect is the hook's: ``PostgresHook`` (psycopg 3 where the provider uses it, which the
    ledger's prepared statements need; psycopg2 takes the general path), ``SqliteHook`` or
    ``MySqlHook`` or ``SnowflakeHook``. Another SQL hook is refused: fencing is proven per
    database (docs/databases.md).
    """
    from airflow.providers.postgres.hooks.postgres import PostgresHook
    from airflow.providers.sqlite.hooks.sqlite import SqliteHook

    conn_id = hook.get_conn_id()
    if type(hook).__name__ == "MySqlHook":  # no import: the mysql provider is an optional extra
        from airflow_crashsafe.store.engines import mysql_from_hook

        return mysql_from_hook(hook)
    if type(hook).__name__ == "SnowflakeHook":  # likewise the snowflake provider
        from airflow_crashsafe.store.engines import snowflake_from_hook

        return snowflake_from_hook(hook)
    if isinstance(hook, PostgresHook):
        raw: Any = hook.get_conn()
        raw.autocommit = False
        return Db(raw, POSTGRES)
    if isinstance(hook, SqliteHook):
        return _sqlite_from_hook(hook, conn_id)
    raise ConfigurationError(
        f"Connection {conn_id!r} has type {hook.connection.conn_type!r} ({type(hook).__name__}); "
        f"crashsafe's fenced writes support {_SUPPORTED} connections, the databases on which "
        "fencing is proven (docs/databases.md says what each guarantees and how to add one)."
    )


def _sqlite_from_hook(hook: SqliteHook, conn_id: str) -> Db:
    """Open a SQLite connection's file, configured as :func:`connect_url` configures it.

    ``SqliteHook.get_conn()`` opens the file named in the connection's host, the form Airflow's UI
    writes. Its connection keeps ``check_same_thread=True``, the one setting that cannot be applied
    after connect: each thread uses only connections it opened (``Db.cancel``'s ``interrupt()`` may
    come from any thread); a :class:`Store` closing a dead thread's connection leaves it to the
    garbage collector. ``sqlite:////abs/path.db`` puts the path in ``schema``, which ``SqliteHook``
    4.3 turns into an invalid ``file://abs/...`` URI: that form and an extra ``path`` are opened here.
    """
    conn = hook.connection
    if conn.host:
        return Db(_configure_sqlite(hook.get_conn()), SQLITE)
    path = (conn.extra_dejson or {}).get("path") or conn.schema
    if not path:
        raise ConfigurationError(
            f"SQLite connection {conn_id!r} names no file; use sqlite:////absolute/path.db."
        )
    return _sqlite(path)


def connect_target(
    conn_id: str, *, connect_timeout: int | None = None, link: Mapping[str, Any] | None = None
) -> Db:
    """Open the Airflow connection ``conn_id`` through its SQL hook (PostgreSQL or SQLite).

    ``connect_timeout`` (seconds) and ``link`` (more libpq parameters; the store passes its
    timeout and keepalives) apply to PostgreSQL unless the connection's extra sets its own.
    """
    conn = _load_connection(conn_id)
    if (conn.conn_type or "").lower() == "duckdb":
        # DuckDBHook when the DuckDB provider is installed, told the file (see duckdb_from_connection).
        from airflow_crashsafe.store.engines import duckdb_from_connection

        return duckdb_from_connection(conn, conn_id)
    hook = _hook_of(conn, conn_id)
    params = dict(link or {})
    if connect_timeout is not None:
        params["connect_timeout"] = connect_timeout
    if params:
        hook = _with_link_params(hook, params)
    return connect_hook(hook)


def _with_link_params(hook: DbApiHook, params: Mapping[str, Any]) -> DbApiHook:
    """The same PostgreSQL hook on a copy of its connection whose extra carries ``params``
    (those the extra does not set already)."""
    import json

    import attrs
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    if not isinstance(hook, PostgresHook):
        return hook
    conn = hook.connection
    missing = {key: value for key, value in params.items() if key not in conn.extra_dejson}
    if not missing or not attrs.has(type(conn)):
        return hook
    extra = json.dumps({**conn.extra_dejson, **missing})
    copied = attrs.evolve(conn, extra=extra)  # type: ignore[misc]
    return PostgresHook(postgres_conn_id=hook.get_conn_id(), connection=copied, options=hook.options)
