"""A target database for the fenced SQL operator tests: set it up and look at it directly."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.operators import PartitionOverwriteOperator
from airflow_crashsafe.store.dbapi import connect_url


def overwrite_revenue(target: SqlTarget, sql: str) -> PartitionOverwriteOperator:
    """Task ``load``: overwrite the 2024-01-02 partition of ``revenue`` with ``sql`` (the matrices' load)."""
    return PartitionOverwriteOperator(
        task_id="load",
        conn_id=target.conn_id,
        target_table="revenue",
        partition={"day": "2024-01-02"},
        sql=sql,
    )


@dataclass(frozen=True)
class SqlTarget:
    """One test database reachable as the Airflow connection ``conn_id`` and directly by ``url``."""

    conn_id: str
    url: str
    dialect: str  # "postgresql" | "sqlite" | "mariadb" | "duckdb" | "snowflake"

    @property
    def is_postgres(self) -> bool:
        return self.dialect == "postgresql"

    def run(self, *statements: str) -> None:
        """Execute set-up statements, committed."""
        db = connect_url(self.url)
        try:
            db.begin()
            for statement in statements:
                db.raw.cursor().execute(statement)
            db.commit()
        finally:
            db.close()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """All rows of a query, sorted, as plain tuples."""
        db = connect_url(self.url)
        try:
            cur = db.raw.cursor()
            cur.execute(sql)
            result = sorted(tuple(r) for r in cur.fetchall())
            db.rollback()
            return result
        finally:
            db.close()

    def has_table(self, name: str) -> bool:
        if self.is_postgres:
            return self.rows(f"SELECT to_regclass('{name}') IS NOT NULL") == [(True,)]
        if self.dialect == "snowflake":  # an unquoted name is stored in upper case
            name = name.upper()
        if self.dialect in ("mariadb", "duckdb", "snowflake"):
            schema = "DATABASE()" if self.dialect == "mariadb" else "current_schema()"
            found = (
                f"SELECT 1 FROM information_schema.tables WHERE table_name = '{name}' "
                f"AND table_schema = {schema}"
            )
            return bool(self.rows(found))
        return bool(self.rows(f"SELECT 1 FROM sqlite_master WHERE name = '{name}'"))

    def fence_rows(self) -> list[tuple[Any, ...]]:
        """(target, issued_try, committed_try) of every fence row; [] before any token was issued."""
        if not self.has_table("crashsafe_fences"):
            return []
        return self.rows("SELECT target, issued_try, committed_try FROM crashsafe_fences")

    def committed_try(self, target: str) -> int | None:
        """The try that committed ``target``'s slot, read from the fence table (None: none did)."""
        rows = [r for r in self.fence_rows() if r[0] == target]
        return rows[0][2] if rows else None
