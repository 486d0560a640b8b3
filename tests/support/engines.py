"""The engines the fencing and operator tests run on, and the fixture that makes each one fresh."""

from __future__ import annotations

__all__ = ["CONCURRENT_WRITERS", "ENGINES", "MYSQL_CLIENTS", "SERIAL_WRITERS", "dialect_of"]

#: The MySQL clients ``MySqlHook`` opens (the connection extra ``client``), each tested on MariaDB:
#: test id -> the URL's ``?client=`` (None: the hook's default, mysqlclient).
MYSQL_CLIENTS = {"mariadb": None, "mariadb-connector": "mysql-connector-python"}
#: Every engine crashsafe fences writes on -> the fixture giving the URL of a fresh one.
ENGINES = {
    "postgresql": "postgres_url",
    "sqlite": "sqlite_url",
    "mariadb": "mariadb_url",  # through mysqlclient
    "mariadb-connector": "mariadb_connector_url",  # the same server through mysql-connector-python
    "duckdb": "duckdb_url",
    "snowflake": "snowflake_url",  # fakesnow's server, a local emulator (docs/databases.md)
}
#: Engines where two attempts can hold open write transactions at once (row locks).
CONCURRENT_WRITERS = ["postgresql", *MYSQL_CLIENTS, "snowflake"]
#: Engines whose writers take turns (one write lock per database file): a newer attempt waits.
SERIAL_WRITERS = ["sqlite", "duckdb"]


def dialect_of(engine: str) -> str:
    """The database behind a test id of :data:`ENGINES` (both MySQL clients reach MariaDB)."""
    return "mariadb" if engine in MYSQL_CLIENTS else engine
