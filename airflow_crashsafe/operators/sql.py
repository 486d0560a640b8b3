"""Fenced SQL operators: writes that take effect once per slot, however often the task runs.

Each operator runs its write as one :func:`~airflow_crashsafe.fencing.fenced_transaction` in the
target database: a stale attempt (a zombie left running after a scheduler reset) is fenced out and
rolled back, and a retry of a slot already committed in this clear generation returns at once,
saying which attempt committed, without running its query again.

Parameters follow the driver's style: ``%(name)s`` / ``%s`` on PostgreSQL, ``:name`` / ``?`` on
SQLite. Identifiers (tables, columns) are always quoted (see :mod:`airflow_crashsafe.sql.quoting`
for how to write ``schema.table`` and names containing dots); values are always bound.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.errors import ConfigurationError, PartitionMismatchError
from airflow_crashsafe.fencing.server_unit import UnitFailure, UnitProgram, render_sql
from airflow_crashsafe.fencing.server_write import UnitDataError
from airflow_crashsafe.operators._sql_base import FencedSQLBase, Params, source_columns
from airflow_crashsafe.sql import checks, statements
from airflow_crashsafe.sql.introspect import TableInfo, server_version
from airflow_crashsafe.sql.quoting import Quoter, TableName, parse_table_name
from airflow_crashsafe.store.dbapi import Db

if TYPE_CHECKING:
    from airflow_crashsafe.fencing import FencedTransaction

__all__ = ["FencedSQLOperator", "NaturalKeyMergeOperator", "PartitionOverwriteOperator"]

_MERGE_MIN_PG = 150000  # MERGE arrived in PostgreSQL 15
_PG_TEMP = "pg_temp.crashsafe_merge_src"
_SQLITE_TEMP = "temp.crashsafe_merge_src"


class PartitionOverwriteOperator(FencedSQLBase):
    """Replace exactly one partition of a table with a query's rows, once per slot.

    Deletes the rows where every ``partition`` column equals its value, then inserts the rows of
    ``sql`` (by column name, as the query names them), in one fenced transaction. Rows the query
    produces outside the partition raise :class:`~airflow_crashsafe.errors.PartitionMismatchError`
    and roll everything back: an overwrite that spills over would not be idempotent.

    :param conn_id: Airflow connection of the target database (postgres or sqlite).
    :param target_table: ``table`` or ``schema.table`` (the fence's target name too).
    :param partition: ``{column: value}`` naming the partition; a None value means IS NULL.
    :param sql: a single SELECT producing the partition's rows.
    :param parameters: the query's parameters, in the driver's style.
    :param slot_partition: override of the slot's partition (default: the run's logical date).
    """

    template_fields: Sequence[str] = ("target_table", "partition", "sql", "parameters", "slot_partition")

    def __init__(
        self,
        *,
        conn_id: str,
        target_table: str,
        partition: dict[str, Any],
        sql: str,
        parameters: Params = None,
        slot_partition: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, slot_partition=slot_partition, **kwargs)
        self.target_table = target_table
        self.partition = partition
        self.sql = sql
        self.parameters = parameters

    def execute(self, context: Any) -> dict[str, Any]:
        if not isinstance(self.partition, Mapping) or not self.partition:
            raise ConfigurationError(
                f"PartitionOverwriteOperator {self.task_id!r} needs a non-empty partition "
                f"{{column: value}}, got {self.partition!r}; without it the DELETE would empty the table."
            )
        table = parse_table_name(self.target_table)
        partition = dict(self.partition)

        def prepare(db: Db) -> TableInfo:
            info = self._describe_target(db, table, unique_keys=False)
            checks.check_columns_exist(info, list(partition), "Partition columns")
            return info

        def columns(db: Db, info: TableInfo) -> list[str]:
            """The source's columns, checked; run only once the slot is known not to be done."""
            names = _source_columns(db, self.sql, self.parameters)
            checks.check_columns_exist(info, names, "Source query columns")
            absent = [c for c in partition if c not in names]
            if absent:
                raise ConfigurationError(
                    f"The source query of {self.task_id!r} does not return the partition column(s) "
                    f"{absent}; return them (e.g. SELECT %s AS day, ...) so every row can be checked "
                    "against the partition."
                )
            return names

        def body(tx: FencedTransaction, info: TableInfo) -> dict[str, Any]:
            return self._overwrite_sqlite(tx, table, columns(tx.db, info), partition)

        def unit(program: UnitProgram, db: Db, info: TableInfo) -> None:
            self._overwrite_unit(program, db, table, columns(db, info), partition)

        try:
            return self._run_fenced(context, table.display(), prepare, body, unit)
        except UnitDataError as exc:
            detail = exc.failure.detail if isinstance(exc.failure.detail, Mapping) else {}
            raise self._mismatch(int(detail.get("outside", 0)), int(detail.get("total", 0)), table) from None

    def _mismatch(self, outside: int, total: int, table: TableName) -> PartitionMismatchError:
        return PartitionMismatchError(
            f"The source query of {self.task_id!r} produced {outside} of {total} row(s) outside "
            f"the partition {dict(self.partition)} of {table}; nothing was written. Filter the query "
            "to the partition (WHERE on the same columns and values) or fix the partition argument."
        )

    def _overwrite_unit(
        self, program: UnitProgram, db: Db, table: TableName, columns: list[str], partition: dict[str, Any]
    ) -> None:
        """PostgreSQL: DELETE the partition, INSERT the source guarded against stray rows."""
        quoter = Quoter.for_db(db)
        qtable, qcols = quoter.table(table), quoter.idents(columns)

        def predicate(b: statements.Binder) -> str:
            return statements.partition_predicate(b, partition, quoter.ident)

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

    def _overwrite_sqlite(
        self, tx: FencedTransaction, table: TableName, columns: list[str], partition: dict[str, Any]
    ) -> dict[str, Any]:
        """SQLite: the same overwrite in the client-driven fenced transaction."""
        if sqlite3.sqlite_version_info < (3, 35, 0):
            raise ConfigurationError(
                f"SQLite {sqlite3.sqlite_version} lacks INSERT ... RETURNING, which the partition check "
                "needs; use Python built with SQLite 3.35 or newer."
            )
        quoter, cur = Quoter.for_db(tx.db), tx.cursor
        qtable = quoter.table(table)

        def predicate(b: statements.Binder) -> str:
            return statements.partition_predicate(b, partition, quoter.ident)

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
            raise self._mismatch(outside, inserted, table)
        return {"rows": inserted, "deleted": deleted}


class NaturalKeyMergeOperator(FencedSQLBase):
    """Upsert a query's rows on a natural key, so a re-run updates rather than double-counts.

    Uses ``MERGE`` on PostgreSQL 15+, ``INSERT ... ON CONFLICT`` on older PostgreSQL and SQLite.
    Before writing anything it refuses a key not backed by a unique index, a generated
    (surrogate) key, a source with NULL or repeated keys, and a non-deterministic source.

    :param natural_key: columns identifying a row in business terms (backed by a unique index).
    :param update_columns: columns updated on a match (default: every source column not in the key).
    :param allow_nondeterministic: accept a source that calls now(), random(), nextval(), ...
    """

    template_fields: Sequence[str] = ("target_table", "sql", "parameters", "slot_partition")

    def __init__(
        self,
        *,
        conn_id: str,
        target_table: str,
        sql: str,
        natural_key: list[str],
        update_columns: list[str] | None = None,
        parameters: Params = None,
        allow_nondeterministic: bool = False,
        slot_partition: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, slot_partition=slot_partition, **kwargs)
        self.target_table = target_table
        self.sql = sql
        self.natural_key = natural_key
        self.update_columns = update_columns
        self.parameters = parameters
        self.allow_nondeterministic = allow_nondeterministic

    def execute(self, context: Any) -> dict[str, Any]:
        key = [self.natural_key] if isinstance(self.natural_key, str) else list(self.natural_key or ())
        if not key or len(set(key)) != len(key):
            raise ConfigurationError(f"natural_key must name distinct columns, got {self.natural_key!r}.")
        update = None if self.update_columns is None else list(self.update_columns)
        if update is not None and set(update) & set(key):
            raise ConfigurationError(f"update_columns {update} must not include natural-key columns {key}.")
        name = f"{type(self).__name__} {self.task_id!r}"
        checks.check_deterministic(self.sql, allowed=self.allow_nondeterministic, operator=name)
        table = parse_table_name(self.target_table)

        def prepare(db: Db) -> tuple[TableInfo, bool]:
            info = self._describe_target(db, table)
            checks.check_natural_key(info, key, Quoter.for_db(db))
            if update is not None:
                checks.check_columns_exist(info, update, "update_columns")
            return info, db.dialect.is_postgres and server_version(db) >= _MERGE_MIN_PG

        def plan(db: Db, prepared: tuple[TableInfo, bool]) -> _MergePlan:
            """Columns checked and quoted; run only once the slot is known not to be done."""
            info, use_merge = prepared
            columns = _source_columns(db, self.sql, self.parameters)
            checks.check_columns_exist(info, columns, "Source query columns")
            missing = [c for c in [*key, *(update or ())] if c not in columns]
            if missing:
                raise ConfigurationError(
                    f"The source query of {self.task_id!r} does not return {missing}, which the natural "
                    f"key or update_columns need (it returns {columns})."
                )
            quoter = Quoter.for_db(db)
            return _MergePlan(
                qtable=quoter.table(table),
                qcols=quoter.idents(columns),
                qkey=quoter.idents(key),
                qupdate=quoter.idents([c for c in columns if c not in key] if update is None else update),
                use_merge=use_merge,
            )

        def body(tx: FencedTransaction, prepared: tuple[TableInfo, bool]) -> dict[str, Any]:
            return self._merge_sqlite(tx, plan(tx.db, prepared), key)

        def unit(program: UnitProgram, db: Db, prepared: tuple[TableInfo, bool]) -> None:
            self._merge_unit(program, db, plan(db, prepared))

        try:
            return self._run_fenced(context, table.display(), prepare, body, unit)
        except UnitDataError as exc:
            raise _source_key_error(key, exc.failure) from None

    def _merge_unit(self, program: UnitProgram, db: Db, plan: _MergePlan) -> None:
        """PostgreSQL: materialize the source once, check its keys, MERGE (or upsert) it."""
        binder = statements.Binder("postgresql", self.parameters)
        materialize = statements.materialize_source(binder, _PG_TEMP, self.sql)
        program.execute(render_sql(db, materialize, binder.params()))
        nulls_sql, dupes_sql = statements.source_key_problems(_PG_TEMP, plan.qkey)
        program.select_into(nulls_sql, "null_rows")
        program.fail_if_positive(
            "null_rows", "CSNUL", f"SELECT json_build_object('null_rows', ({nulls_sql}))::text"
        )
        program.select_into(f"SELECT count(*) FROM ({dupes_sql}) AS d", "duplicated")
        program.fail_if_positive(
            "duplicated", "CSDUP", f"SELECT json_agg(to_json(d))::text FROM ({dupes_sql}) AS d"
        )
        program.select_into(f"SELECT count(*) FROM {_PG_TEMP}", "source_rows")
        if plan.use_merge:
            sql = statements.merge(plan.qtable, _PG_TEMP, plan.qcols, plan.qkey, plan.qupdate)
        else:
            sql = statements.upsert("postgresql", plan.qtable, _PG_TEMP, plan.qcols, plan.qkey, plan.qupdate)
        program.execute(sql, count_as="rows")
        program.execute(f"DROP TABLE {_PG_TEMP}")
        program.result_keys = ["rows", "source_rows"]

    def _merge_sqlite(self, tx: FencedTransaction, plan: _MergePlan, key: list[str]) -> dict[str, Any]:
        """SQLite: the same checks and upsert in the client-driven fenced transaction."""
        cur = tx.cursor
        cur.execute(f"DROP TABLE IF EXISTS {_SQLITE_TEMP}")
        binder = statements.Binder("sqlite", self.parameters)
        cur.execute(statements.materialize_source(binder, _SQLITE_TEMP, self.sql), binder.params())
        nulls_sql, dupes_sql = statements.source_key_problems(_SQLITE_TEMP, plan.qkey)
        cur.execute(nulls_sql)
        null_rows = int(cur.fetchone()[0])
        cur.execute(dupes_sql)
        dupes = cur.fetchall()
        checks.check_source_keys(key, null_rows, [r[:-1] for r in dupes], int(dupes[0][-1]) if dupes else 0)
        cur.execute(f"SELECT count(*) FROM {_SQLITE_TEMP}")
        source_rows = int(cur.fetchone()[0])
        cur.execute(
            statements.upsert("sqlite", plan.qtable, _SQLITE_TEMP, plan.qcols, plan.qkey, plan.qupdate)
        )
        changed = max(int(cur.rowcount), 0)
        cur.execute(f"DROP TABLE {_SQLITE_TEMP}")
        return {"rows": changed, "source_rows": source_rows}


@dataclass(frozen=True)
class _MergePlan:
    """What the MERGE needs, quoted, decided before any token is taken."""

    qtable: str
    qcols: list[str]
    qkey: list[str]
    qupdate: list[str]
    use_merge: bool


def _source_columns(db: Db, sql: str, parameters: Params) -> list[str]:
    """The source query's column names, from a ``LIMIT 0`` run (PostgreSQL does not run its plan)."""
    binder = statements.Binder(db.dialect.name, parameters)
    cursor = db.raw.cursor()
    cursor.execute(statements.describe_source(binder, sql), binder.params())
    return source_columns(cursor)


def _source_key_error(key: list[str], failure: UnitFailure) -> Exception:
    """The unit's coded key failure as the error the client-driven check raises."""
    detail = failure.detail
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


class FencedSQLOperator(FencedSQLBase):
    """Run your own statements, in order, as one fenced transaction on ``target``.

    With mapping parameters (or none), the statements may use the fence's own values:
    ``%(crashsafe_token)s`` / ``%(crashsafe_try_number)s`` on PostgreSQL, ``:crashsafe_token`` /
    ``:crashsafe_try_number`` on SQLite, e.g. to store which attempt wrote a row. Without
    parameters, a statement that uses none of them runs exactly as written (``%`` stays literal);
    one that does is a parameterized query, so write ``%%`` for a literal ``%`` on PostgreSQL.
    Sequence parameters are passed to every statement as they are.

    :param sql: one statement, or a list run in order (one statement per item).
    :param target: what the statements write, naming the fence (usually the table).
    """

    template_fields: Sequence[str] = ("sql", "target", "parameters", "slot_partition")

    def __init__(
        self,
        *,
        conn_id: str,
        sql: str | list[str],
        target: str,
        parameters: Params = None,
        slot_partition: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, slot_partition=slot_partition, **kwargs)
        self.sql = sql
        self.target = target
        self.parameters = parameters

    def execute(self, context: Any) -> dict[str, Any]:
        stmts = [self.sql] if isinstance(self.sql, str) else list(self.sql or ())
        stmts = [s for s in stmts if s and s.strip()]
        if not stmts:
            raise ConfigurationError(f"FencedSQLOperator {self.task_id!r} got no SQL statements to run.")
        if not self.target:
            raise ConfigurationError(f"FencedSQLOperator {self.task_id!r} needs a target name for its fence.")

        def body(tx: FencedTransaction, _: Any) -> dict[str, Any]:
            rows = 0
            for stmt in stmts:
                params = self._params_for(stmt, tx)
                if params is None:
                    tx.cursor.execute(stmt)
                else:
                    tx.cursor.execute(stmt, params)
                rows += max(int(tx.cursor.rowcount), 0)
            return {"rows": rows, "statements": len(stmts)}

        def unit(program: UnitProgram, db: Db, _: Any) -> None:
            fence = {"crashsafe_token": program.token, "crashsafe_try_number": program.try_number}
            for stmt in stmts:
                params = self._params_with(stmt, fence, postgres=True)
                program.execute(render_sql(db, stmt, params), count_as="rows", add=True)
            program.constants["statements"] = len(stmts)

        return self._run_fenced(context, str(self.target), lambda db: None, body, unit)

    def _params_for(self, stmt: str, tx: FencedTransaction) -> Any:
        return self._params_with(stmt, tx.params, postgres=tx.db.dialect.is_postgres)

    def _params_with(self, stmt: str, fence: Mapping[str, Any], *, postgres: bool) -> Any:
        """The user's mapping merged with the fence's values; a sequence as is."""
        if isinstance(self.parameters, Mapping):
            return {**self.parameters, **fence}
        if self.parameters is not None:
            return self.parameters
        marker = "%(crashsafe_" if postgres else ":crashsafe_"
        return dict(fence) if marker in stmt else None
