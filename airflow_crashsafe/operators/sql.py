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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.errors import ConfigurationError, PartitionMismatchError
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
_DIVISION_BY_ZERO = "22012"  # what the partition guard raises on a row outside the partition


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

        def body(tx: FencedTransaction, info: TableInfo) -> dict[str, Any]:
            return self._overwrite(tx, table, info, partition)

        return self._run_fenced(context, table.display(), prepare, body)

    def _overwrite(
        self, tx: FencedTransaction, table: TableName, info: TableInfo, partition: dict[str, Any]
    ) -> dict[str, Any]:
        dialect, quoter, cur = tx.db.dialect.name, Quoter.for_db(tx.db), tx.cursor
        binder = statements.Binder(dialect, self.parameters)
        cur.execute(statements.describe_source(binder, self.sql), binder.params())
        columns = source_columns(cur)
        checks.check_columns_exist(info, columns, "Source query columns")
        absent = [c for c in partition if c not in columns]
        if absent:
            raise ConfigurationError(
                f"The source query of {self.task_id!r} does not return the partition column(s) {absent}; "
                "return them (e.g. SELECT %s AS day, ...) so every row can be checked against the partition."
            )
        qtable = quoter.table(table)

        def predicate(b: statements.Binder) -> str:
            return statements.partition_predicate(b, partition, quoter.ident)

        delete = statements.Binder(dialect, None)
        cur.execute(statements.delete_partition(qtable, predicate(delete)), delete.params())
        deleted = max(int(cur.rowcount), 0)
        qcols = quoter.idents(columns)
        if tx.db.dialect.is_postgres:
            inserted, outside = self._insert_guarded(cur, dialect, qtable, qcols, predicate)
        else:
            if sqlite3.sqlite_version_info < (3, 35, 0):
                raise ConfigurationError(
                    f"SQLite {sqlite3.sqlite_version} lacks INSERT ... RETURNING, which the partition check "
                    "needs; use Python built with SQLite 3.35 or newer."
                )
            binder = statements.Binder(dialect, self.parameters)
            sql = statements.insert_partition_returning(binder, qtable, qcols, self.sql, predicate)
            cur.execute(sql, binder.params())
            flags = cur.fetchall()
            inserted, outside = len(flags), sum(1 for (flag,) in flags if flag)
        if outside:
            raise PartitionMismatchError(
                f"The source query of {self.task_id!r} produced {outside} of {inserted} row(s) outside "
                f"the partition {partition} of {table}; nothing was written. Filter the query to the "
                "partition (WHERE on the same columns and values) or fix the partition argument."
            )
        return {"rows": inserted, "deleted": deleted}

    def _insert_guarded(
        self,
        cur: Any,
        dialect: str,
        qtable: str,
        qcols: list[str],
        predicate: Callable[[statements.Binder], str],
    ) -> tuple[int, int]:
        """PostgreSQL: the guarded INSERT under a savepoint; (inserted, 0) or (source rows, outside)."""
        binder = statements.Binder(dialect, self.parameters)
        cur.execute("SAVEPOINT crashsafe_overwrite")
        try:
            cur.execute(
                statements.insert_partition_guarded(binder, qtable, qcols, self.sql, predicate),
                binder.params(),
            )
        except Exception as exc:
            if (getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)) != _DIVISION_BY_ZERO:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT crashsafe_overwrite")
            binder = statements.Binder(dialect, self.parameters)
            try:
                cur.execute(statements.count_outside_partition(binder, self.sql, predicate), binder.params())
                total, outside = (int(v) for v in cur.fetchone())
            except Exception:
                raise exc from None  # the query's own division by zero
            if not outside:
                raise
            return total, outside
        inserted = int(cur.rowcount)
        cur.execute("RELEASE SAVEPOINT crashsafe_overwrite")
        return inserted, 0


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
            use_merge = db.dialect.is_postgres and server_version(db) >= _MERGE_MIN_PG
            return info, use_merge

        def body(tx: FencedTransaction, prepared: tuple[TableInfo, bool]) -> dict[str, Any]:
            return self._merge(tx, table, prepared[0], key, update, use_merge=prepared[1])

        return self._run_fenced(context, table.display(), prepare, body)

    def _merge(
        self,
        tx: FencedTransaction,
        table: TableName,
        info: TableInfo,
        key: list[str],
        update: list[str] | None,
        *,
        use_merge: bool,
    ) -> dict[str, Any]:
        db, cur, quoter = tx.db, tx.cursor, Quoter.for_db(tx.db)
        temp = _PG_TEMP if db.dialect.is_postgres else _SQLITE_TEMP
        if not db.dialect.is_postgres:
            cur.execute(f"DROP TABLE IF EXISTS {temp}")
        binder = statements.Binder(db.dialect.name, self.parameters)
        cur.execute(statements.materialize_source(binder, temp, self.sql), binder.params())
        cur.execute(f"SELECT * FROM {temp} LIMIT 0")
        columns = source_columns(cur)
        checks.check_columns_exist(info, columns, "Source query columns")
        missing = [c for c in [*key, *(update or ())] if c not in columns]
        if missing:
            raise ConfigurationError(
                f"The source query of {self.task_id!r} does not return {missing}, which the natural key "
                f"or update_columns need (it returns {columns})."
            )
        update = [c for c in columns if c not in key] if update is None else update
        qkey = quoter.idents(key)
        nulls_sql, dupes_sql = statements.source_key_problems(temp, qkey)
        cur.execute(nulls_sql)
        null_rows = int(cur.fetchone()[0])
        cur.execute(dupes_sql)
        dupes = cur.fetchall()
        checks.check_source_keys(key, null_rows, [r[:-1] for r in dupes], int(dupes[0][-1]) if dupes else 0)
        cur.execute(f"SELECT count(*) FROM {temp}")
        source_rows = int(cur.fetchone()[0])
        qcols, qupdate, qtable = quoter.idents(columns), quoter.idents(update), quoter.table(table)
        if use_merge:
            sql = statements.merge(qtable, temp, qcols, qkey, qupdate)
        else:
            sql = statements.upsert(db.dialect.name, qtable, temp, qcols, qkey, qupdate)
        cur.execute(sql)
        changed = max(int(cur.rowcount), 0)
        if not db.dialect.is_postgres:
            cur.execute(f"DROP TABLE {temp}")
        return {"rows": changed, "source_rows": source_rows}


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

        return self._run_fenced(context, str(self.target), lambda db: None, body)

    def _params_for(self, stmt: str, tx: FencedTransaction) -> Any:
        """The user's mapping merged with the fence's values; a sequence as is."""
        if isinstance(self.parameters, Mapping):
            return {**self.parameters, **tx.params}
        if self.parameters is not None:
            return self.parameters
        marker = "%(crashsafe_" if tx.db.dialect.is_postgres else ":crashsafe_"
        return dict(tx.params) if marker in stmt else None
