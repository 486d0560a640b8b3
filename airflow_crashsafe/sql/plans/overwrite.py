"""Replace one partition: DELETE where the partition columns equal their values, INSERT the source.

Rows the source produces outside the partition roll everything back with
:class:`~airflow_crashsafe.errors.PartitionMismatchError`: an overwrite that spills over would
not be idempotent. PostgreSQL guards each inserted row inside the unit (a division by zero marks
a stray row, then a count says how many); SQLite inserts with ``RETURNING`` a stray-row flag.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.errors import ConfigurationError, PartitionMismatchError
from airflow_crashsafe.sql import checks, statements
from airflow_crashsafe.sql.fenceable import Named, check_tables
from airflow_crashsafe.sql.introspect import TableInfo
from airflow_crashsafe.sql.plans import OpenTransaction, Params, portable
from airflow_crashsafe.sql.plans.source import describe_target, query_columns
from airflow_crashsafe.sql.plans.values import check_parameters, check_partition, check_sql
from airflow_crashsafe.sql.quoting import Quoter, TableName, parse_table_name
from airflow_crashsafe.sql.unit_program import UnitFailure, UnitProgram, render_sql
from airflow_crashsafe.store.dbapi import Db

__all__ = ["OverwritePlan"]


@dataclass(frozen=True)
class OverwritePlan:
    """The partition overwrite of one task, its arguments validated."""

    task_id: str
    conn_id: str
    table: TableName
    partition: dict[str, Any]
    sql: str
    parameters: Params

    @classmethod
    def build(
        cls,
        *,
        task_id: str,
        conn_id: str,
        target_table: str,
        partition: Any,
        sql: str,
        parameters: Params,
    ) -> OverwritePlan:
        """Validate the arguments (before any connection is opened)."""
        if not isinstance(partition, Mapping) or not partition:
            raise ConfigurationError(
                f"PartitionOverwriteOperator {task_id!r} needs a non-empty partition "
                f"{{column: value}}, got {partition!r}; without it the DELETE would empty the table."
            )
        check_partition(partition, task_id)
        check_parameters(parameters, task_id)
        check_sql(sql, task_id)
        return cls(task_id, conn_id, parse_table_name(target_table), dict(partition), sql, parameters)

    @property
    def target(self) -> str:
        return self.table.display()

    def prepare(self, db: Db) -> TableInfo:
        info = describe_target(db, self.table, self.conn_id, unique_keys=False)
        check_tables(db, [Named(self.table, f"the target of {self.task_id!r}")])
        checks.check_columns_exist(info, list(self.partition), "Partition columns")
        return info

    def _columns(self, db: Db, info: TableInfo) -> list[str]:
        """The source's columns, checked; run only once the slot is known not to be done."""
        names = query_columns(db, self.sql, self.parameters)
        checks.check_columns_exist(info, names, "Source query columns")
        absent = [c for c in self.partition if c not in names]
        if absent:
            raise ConfigurationError(
                f"The source query of {self.task_id!r} does not return the partition column(s) "
                f"{absent}; return them (e.g. SELECT %s AS day, ...) so every row can be checked "
                "against the partition."
            )
        return names

    def _predicate(self, quoter: Quoter) -> Callable[[statements.Binder], str]:
        def predicate(b: statements.Binder) -> str:
            return statements.partition_predicate(b, self.partition, quoter.ident)

        return predicate

    def unit(self, program: UnitProgram, db: Db, prepared: TableInfo) -> None:
        """PostgreSQL: DELETE the partition, INSERT the source guarded against stray rows."""
        quoter = Quoter.for_db(db)
        qtable, qcols = quoter.table(self.table), quoter.idents(self._columns(db, prepared))
        predicate = self._predicate(quoter)
        delete = statements.Binder("postgresql", None)
        delete_sql = statements.delete_partition(qtable, predicate(delete))
        program.execute(render_sql(db, delete_sql, delete.params()), count_as="deleted")
        insert = statements.Binder("postgresql", self.parameters)
        insert_sql = statements.insert_partition_guarded(insert, qtable, qcols, self.sql, predicate)
        count = statements.Binder("postgresql", self.parameters)
        count_sql = statements.count_outside_partition(count, self.sql, predicate)
        program.guarded_execute(
            render_sql(db, insert_sql, insert.params()),
            "rows",
            on_division_by_zero=render_sql(db, count_sql, count.params()),
            code="CSOUT",
        )

    def transaction(self, tx: OpenTransaction, prepared: TableInfo) -> dict[str, Any]:
        """SQLite (MySQL/MariaDB, DuckDB: :mod:`.portable`): the overwrite in the fenced transaction."""
        if tx.db.dialect.name in portable.PORTABLE:
            return self._portable(tx, prepared)
        if sqlite3.sqlite_version_info < (3, 35, 0):
            raise ConfigurationError(
                f"SQLite {sqlite3.sqlite_version} lacks INSERT ... RETURNING, which the partition check "
                "needs; use Python built with SQLite 3.35 or newer."
            )
        columns = self._columns(tx.db, prepared)
        quoter, cur = Quoter.for_db(tx.db), tx.cursor
        qtable = quoter.table(self.table)
        predicate = self._predicate(quoter)
        delete = statements.Binder("sqlite", None)
        cur.execute(statements.delete_partition(qtable, predicate(delete)), delete.params())
        deleted = max(int(cur.rowcount), 0)
        binder = statements.Binder("sqlite", self.parameters)
        sql = statements.insert_partition_returning(
            binder, qtable, quoter.idents(columns), self.sql, predicate
        )
        cur.execute(sql, binder.params())
        flags = cur.fetchall()
        inserted, outside = len(flags), sum(1 for (flag,) in flags if flag)
        if outside:
            raise self._mismatch(outside, inserted)
        return {"rows": inserted, "deleted": deleted}

    def _portable(self, tx: OpenTransaction, prepared: TableInfo) -> dict[str, Any]:
        quoter = Quoter.for_db(tx.db)
        qcols = quoter.idents(self._columns(tx.db, prepared))
        inserted, deleted, outside = portable.overwrite(
            tx, quoter.table(self.table), qcols, self.sql, self.parameters, self._predicate(quoter)
        )
        if outside:
            raise self._mismatch(outside, inserted)
        return {"rows": inserted, "deleted": deleted}

    def data_error(self, failure: UnitFailure) -> Exception:
        detail = failure.detail if isinstance(failure.detail, Mapping) else {}
        return self._mismatch(int(detail.get("outside", 0)), int(detail.get("total", 0)))

    def _mismatch(self, outside: int, total: int) -> PartitionMismatchError:
        return PartitionMismatchError(
            f"The source query of {self.task_id!r} produced {outside} of {total} row(s) outside "
            f"the partition {self.partition} of {self.table}; nothing was written. Filter the query "
            "to the partition (WHERE on the same columns and values) or fix the partition argument."
        )
