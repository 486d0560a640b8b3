"""The two MySQL clients ``MySqlHook`` opens, driven through one surface: mysqlclient's.

``MySqlHook.get_conn()`` opens mysqlclient (``MySQLdb``, its default) or, with ``"client":
"mysql-connector-python"`` in the connection's extra, mysql-connector-python. crashsafe drives a
MySQL/MariaDB connection the way mysqlclient works, and :class:`ConnectorConnection` gives
mysql-connector that surface. What differs, and what crashsafe needs the same from both:

- **autocommit** is a method in mysqlclient (``conn.autocommit(False)``), a property in
  mysql-connector (``conn.autocommit = False``);
- **the server thread** (for ``KILL QUERY``): ``thread_id()`` vs ``connection_id``; the host line:
  ``get_host_info()`` vs ``server_host``;
- **reading results**: mysqlclient's default cursor stores a result as it arrives; mysql-connector's
  reads rows on demand and refuses any other statement on the connection while a row is unread
  ("Unread result found"). crashsafe, and a fenced body, read one row of a result and move on,
  so mysql-connector's cursors are buffered here;
- **``%`` in a statement run with parameters**: mysqlclient fills it in with Python's ``%``
  operator, so ``%%`` is a literal ``%``; mysql-connector replaces only the placeholders. The same
  statement must mean the same through either client (crashsafe's own statements, a source query
  written for no parameters that crashsafe runs with its own, a DAG moved to the other client), so
  ``%%`` is made ``%`` here first, as mysqlclient would;
- **warnings** of the last statement: ``warning_count()`` in mysqlclient, the OK packet's
  ``warning_count`` in mysql-connector (read after a ``ROLLBACK``: see
  :func:`rollback_left_changes`).

Both send statements joined by ``;`` in one round trip (``CLIENT_MULTI_STATEMENTS``, which both set
by default) and step through their results with ``nextset()``; both accept literals in MariaDB's
``EXECUTE ... USING``. mysql-connector is used as installed: its C extension when it loads, else
its pure-Python implementation (the C extension wants OpenSSL 3.2; Debian 12 has 3.0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "CLIENTS",
    "DEFAULT_CLIENT",
    "ConnectorConnection",
    "check_client",
    "connect_client",
    "mysql_connection",
    "rollback_left_changes",
]

DEFAULT_CLIENT = "mysqlclient"
#: The clients ``MySqlHook`` opens (the connection extra ``client``), both supported here.
CLIENTS = (DEFAULT_CLIENT, "mysql-connector-python")
_CANNOT_ROLL_BACK = 1196  # ER_WARNING_NOT_COMPLETE_ROLLBACK


def check_client(client: object, where: str) -> str:
    """``client`` (None: the default) if it is one of :data:`CLIENTS`; else a clear error."""
    name = DEFAULT_CLIENT if client in (None, "") else str(client)
    if name not in CLIENTS:
        raise ConfigurationError(
            f"{where} asks for the MySQL client {name!r}; crashsafe fences writes through "
            f"{' or '.join(repr(c) for c in CLIENTS)} (the clients MySqlHook opens): set the "
            "connection's extra 'client' to one of them, or leave it out for mysqlclient."
        )
    return name


def connect_client(client: str, *, host: str, port: int, user: str, password: str, database: str) -> Any:
    """Open ``client`` (one of :data:`CLIENTS`) directly, as ``MySqlHook`` would, in utf8mb4."""
    if client == DEFAULT_CLIENT:
        from importlib import import_module

        mysqldb = import_module("MySQLdb")  # mysqlclient ships no type stubs
        return mysqldb.connect(
            host=host, port=port, user=user, passwd=password, database=database, charset="utf8mb4"
        )
    import mysql.connector

    return mysql.connector.connect(
        host=host, port=port, user=user, password=password, database=database, charset="utf8mb4"
    )


def mysql_connection(raw: Any) -> Any:
    """A connection ``MySqlHook`` (or :func:`connect_client`) opened, with mysqlclient's surface."""
    if isinstance(raw, ConnectorConnection) or type(raw).__module__.startswith("MySQLdb"):
        return raw
    if type(raw).__module__.startswith("mysql.connector"):
        return ConnectorConnection(raw)
    raise ConfigurationError(
        f"A MySQL connection of type {type(raw).__module__}.{type(raw).__name__} is neither "
        f"mysqlclient's nor mysql-connector-python's; crashsafe fences writes through {CLIENTS}."
    )


class _ConnectorCursor:
    """A buffered mysql-connector cursor taking ``%%`` as mysqlclient does (see the module's doc)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] | None = None) -> None:
        if params is None:
            self._cursor.execute(sql)
        else:
            self._cursor.execute(sql.replace("%%", "%"), params)

    def executemany(self, sql: str, seq: Sequence[Any]) -> None:
        self._cursor.executemany(sql.replace("%%", "%"), seq)

    def __getattr__(self, name: str) -> Any:  # fetchone, fetchall, description, rowcount, nextset, ...
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        return iter(self._cursor)

    def __enter__(self) -> _ConnectorCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()


class ConnectorConnection:
    """A mysql-connector-python connection as crashsafe drives a mysqlclient one.

    :ivar connection: the mysql-connector connection itself.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self._warnings = 0

    def autocommit(self, on: bool) -> None:
        self.connection.autocommit = on

    def get_autocommit(self) -> bool:
        return bool(self.connection.autocommit)

    def thread_id(self) -> int:
        return int(self.connection.connection_id)

    def get_server_info(self) -> str:
        return str(self.connection.server_info)

    def get_host_info(self) -> str:
        return f"{self.connection.server_host} via TCP/IP (mysql-connector-python)"

    @property
    def client_flag(self) -> int:
        return int(self.connection.client_flags)

    @property
    def open(self) -> bool:
        return bool(self.connection.is_connected())

    def cursor(self) -> _ConnectorCursor:
        return _ConnectorCursor(self.connection.cursor(buffered=True))

    def commit(self) -> None:
        self.connection.commit()

    def rollback(self) -> None:
        # As the connector's rollback() sends it, keeping the OK packet's warning count.
        self._warnings = int(self.connection.cmd_query("ROLLBACK").get("warning_count", 0))

    def warning_count(self) -> int:
        """Warnings of the last :meth:`rollback` (the only statement crashsafe asks this of)."""
        return self._warnings

    def close(self) -> None:
        self.connection.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.connection, name)


def rollback_left_changes(raw: Any) -> bool:
    """Right after a ``ROLLBACK`` on ``raw``: did the server say changes could not be rolled back?

    MySQL and MariaDB warn (1196) when a rolled-back transaction changed a table whose engine
    cannot roll back (MyISAM, Aria, MEMORY, ...): those changes stand. The warning count comes
    with the ``ROLLBACK``'s answer, so only a rollback that has warnings costs a round trip more.
    A warning list that cannot be read counts as changes left: the caller must not say the
    write was undone when it does not know.
    """
    if int(raw.warning_count() or 0) == 0:
        return False
    try:
        cursor = raw.cursor()
        cursor.execute("SHOW WARNINGS")
        rows = cursor.fetchall()
    except Exception:
        return True
    return any(int(row[1]) == _CANNOT_ROLL_BACK for row in rows)
