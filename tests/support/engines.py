"""The engines the fencing and operator tests run on, and the fixture that makes each one fresh."""

from __future__ import annotations

__all__ = ["CONCURRENT_WRITERS", "ENGINES", "SERIAL_WRITERS"]

#: Every engine crashsafe fences writes on -> the fixture giving the URL of a fresh one.
ENGINES = {
    "postgresql": "postgres_url",
    "sqlite": "sqlite_url",
    "mariadb": "mariadb_url",
    "duckdb": "duckdb_url",
    "snowflake": "snowflake_url",  # fakesnow's server, a local emulator (docs/databases.md)
}
#: Engines where two attempts can hold open write transactions at once (row locks).
CONCURRENT_WRITERS = ["postgresql", "mariadb", "snowflake"]
#: Engines whose writers take turns (one write lock per database file): a newer attempt waits.
SERIAL_WRITERS = ["sqlite", "duckdb"]
