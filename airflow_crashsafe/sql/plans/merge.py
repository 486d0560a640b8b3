"""Upsert a source on a natural key, so a re-run updates rather than double-counts.

``MERGE`` on PostgreSQL 15+, ``INSERT ... ON CONFLICT`` on older PostgreSQL and SQLite. Before
writing, the source is materialized once and refused if a natural key is NULL or repeated; the
key itself must be backed by a unique index and not be a generated (surrogate) key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql import checks, statements
from airflow_crashsafe.sql.fenceable import Named, check_tables
from airflow_crashsafe.sql.introspect import TableInfo, server_version
from airflow_crashsafe.sql.plans import OpenTransaction, Params, portable
from airflow_crashsafe.sql.plans.source import describe_target, query_columns
from airflow_crashsafe.sql.plans.values import check_parameters, check_sql
from airflow_crashsafe.sql.quoting import Quoter, TableName, parse_table_name
from airflow_crashsafe.sql.unit_program import UnitFailure, UnitProgram, render_sql
from airflow_crashsafe.store.dbapi import Db

__all__ = ["MergePlan"]

_MERGE_MIN_PG = 150000  # MERGE arrived in PostgreSQL 15
_PG_TEMP = "pg_temp.crashsafe_merge_src"
_SQLITE_TEMP = "temp.crashsafe_merge_src"


@dataclass(frozen=True)
class _Quoted:
    """What the MERGE needs, quoted, decided once the slot is known not to be done."""

    qtable: str
    qcols: list[str]
    qkey: list[str]
    qupdate: list[str]
    use_merge: bool


@dataclass(frozen=True)
class MergePlan:
    """The natural-key merge of one task, its arguments validated."""

    task_id: str
    conn_id: str
    table: TableName
    sql: str
    key: list[str]
    update: list[str] | None
    parameters: Params
    allow_nondeterministic: bool = False

    @classmethod
    def build(
        cls,
        *,
        operator: str,
        task_id: str,
        conn_id: str,
        target_table: str,
        sql: str,
        natural_key: Any,
        update_columns: list[str] | None,
        parameters: Params,
        allow_nondeterministic: bool,
    ) -> MergePlan:
        """Validate the arguments and refuse a non-deterministic source (before connecting)."""
        key = [natural_key] if isinstance(natural_key, str) else natural_key
        if not isinstance(key, (list, tuple)) or not all(isinstance(k, str) for k in key):
            raise ConfigurationError(
                f"natural_key of {task_id!r} must be a column name or a list of column names, got "
                f"{natural_key!r}: e.g. natural_key=['order_id']."
            )
        key = list(key)
        if not key or len(set(key)) != len(key):
            raise ConfigurationError(f"natural_key must name distinct columns, got {natural_key!r}.")
        update = None if update_columns is None else list(update_columns)
        if update is not None and set(update) & set(key):
            raise ConfigurationError(f"update_columns {update} must not include natural-key columns {key}.")
        check_parameters(parameters, task_id)
        check_sql(sql, task_id)
        checks.check_deterministic(sql, allowed=allow_nondeterministic, operator=f"{operator} {task_id!r}")
        return cls(
            task_id,
            conn_id,
            parse_table_name(target_table),
            sql,
            key,
            update,
            parameters,
            allow_nondeterministic,
        )

    @property
    def target(self) -> str:
        return self.table.display()

    def prepare(self, db: Db) -> tuple[TableInfo, bool]:
        if db.dialect.name in portable.PORTABLE and not self.allow_nondeterministic:
            # build() checked the calls every dialect shares; these are the target dialect's own.
            calls = portable.dialect_nondeterministic_calls(db.dialect.name, self.sql)
            operator = f"NaturalKeyMergeOperator {self.task_id!r}"
            checks.check_deterministic(self.sql, allowed=False, operator=operator, dialect_calls=calls)
        info = describe_target(db, self.table, self.conn_id)
        check_tables(db, [Named(self.table, f"the target of {self.task_id!r}")])
        checks.check_natural_key(info, self.key, Quoter.for_db(db))
        if self.update is not None:
            checks.check_columns_exist(info, self.update, "update_columns")
        return info, db.dialect.is_postgres and server_version(db) >= _MERGE_MIN_PG

    def _quoted(self, db: Db, prepared: tuple[TableInfo, bool]) -> _Quoted:
        """Columns checked and quoted; run only once the slot is known not to be done."""
        info, use_merge = prepared
        key, update = self.key, self.update
        columns = query_columns(db, self.sql, self.parameters)
        checks.check_columns_exist(info, columns, "Source query columns")
        missing = [c for c in [*key, *(update or ())] if c not in columns]
        if missing:
            raise ConfigurationError(
                f"The source query of {self.task_id!r} does not return {missing}, which the natural "
                f"key or update_columns need (it returns {columns})."
            )
        quoter = Quoter.for_db(db)
        return _Quoted(
            qtable=quoter.table(self.table),
            qcols=quoter.idents(columns),
            qkey=quoter.idents(key),
            qupdate=quoter.idents([c for c in columns if c not in key] if update is None else update),
            use_merge=use_merge,
        )

    def unit(self, program: UnitProgram, db: Db, prepared: tuple[TableInfo, bool]) -> None:
        """PostgreSQL: materialize the source once, check its keys, MERGE (or upsert) it."""
        q = self._quoted(db, prepared)
        binder = statements.Binder("postgresql", self.parameters)
        materialize = statements.materialize_source(binder, _PG_TEMP, self.sql)
        program.execute(render_sql(db, materialize, binder.params()))
        nulls_sql, dupes_sql = statements.source_key_problems(_PG_TEMP, q.qkey)
        program.select_into(nulls_sql, "null_rows")
        program.fail_if_positive(
            "null_rows", "CSNUL", f"SELECT json_build_object('null_rows', ({nulls_sql}))::text"
        )
        program.select_into(f"SELECT count(*) FROM ({dupes_sql}) AS d", "duplicated")
        program.fail_if_positive(
            "duplicated", "CSDUP", f"SELECT json_agg(to_json(d))::text FROM ({dupes_sql}) AS d"
        )
        program.select_into(f"SELECT count(*) FROM {_PG_TEMP}", "source_rows")
        if q.use_merge:
            sql = statements.merge(q.qtable, _PG_TEMP, q.qcols, q.qkey, q.qupdate)
        else:
            sql = statements.upsert("postgresql", q.qtable, _PG_TEMP, q.qcols, q.qkey, q.qupdate)
        program.execute(sql, count_as="rows")
        program.execute(f"DROP TABLE {_PG_TEMP}")
        program.result_keys = ["rows", "source_rows"]

    def transaction(self, tx: OpenTransaction, prepared: tuple[TableInfo, bool]) -> dict[str, Any]:
        """SQLite (MySQL/MariaDB, DuckDB: :mod:`.portable`): checks and upsert in the fenced transaction."""
        q = self._quoted(tx.db, prepared)
        if tx.db.dialect.name in portable.PORTABLE:
            columns = query_columns(tx.db, self.sql, self.parameters)

            def check_keys(null_rows: int, dupes: list[Any]) -> None:
                counts = int(dupes[0][-1]) if dupes else 0
                checks.check_source_keys(self.key, null_rows, [r[:-1] for r in dupes], counts)

            quoted = (q.qtable, q.qcols, q.qkey, q.qupdate)
            return portable.merge(
                tx, prepared[0], self.key, columns, quoted, self.sql, self.parameters, check_keys
            )
        cur = tx.cursor
        cur.execute(f"DROP TABLE IF EXISTS {_SQLITE_TEMP}")
        binder = statements.Binder("sqlite", self.parameters)
        cur.execute(statements.materialize_source(binder, _SQLITE_TEMP, self.sql), binder.params())
        nulls_sql, dupes_sql = statements.source_key_problems(_SQLITE_TEMP, q.qkey)
        cur.execute(nulls_sql)
        null_rows = int(cur.fetchone()[0])
        cur.execute(dupes_sql)
        dupes = cur.fetchall()
        checks.check_source_keys(
            self.key, null_rows, [r[:-1] for r in dupes], int(dupes[0][-1]) if dupes else 0
        )
        cur.execute(f"SELECT count(*) FROM {_SQLITE_TEMP}")
        source_rows = int(cur.fetchone()[0])
        cur.execute(statements.upsert("sqlite", q.qtable, _SQLITE_TEMP, q.qcols, q.qkey, q.qupdate))
        changed = max(int(cur.rowcount), 0)
        cur.execute(f"DROP TABLE {_SQLITE_TEMP}")
        return {"rows": changed, "source_rows": source_rows}

    def data_error(self, failure: UnitFailure) -> Exception:
        """The unit's coded key failure as the error the client-driven check raises."""
        key, detail = self.key, failure.detail
        if failure.code == "CSNUL":
            null_rows = int(detail.get("null_rows", 1)) if isinstance(detail, Mapping) else 1
            error = checks.source_keys_error(key, null_rows, [], 0)
        else:
            rows = [d for d in detail if isinstance(d, Mapping)] if isinstance(detail, list) else []
            dupes = [[*(r.get(k) for k in key), r.get("crashsafe_n")] for r in rows]
            distinct = int(rows[0].get("crashsafe_keys", len(rows))) if rows else 0
            error = checks.source_keys_error(key, 0, dupes, distinct)
        return error or ConfigurationError(
            f"The source query's natural key {key} failed a check ({failure.code})."
        )
