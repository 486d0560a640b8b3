"""Fenced SQL operators: writes that take effect once per slot, however often the task runs.

Each operator runs its write as one fenced write in the target database: a stale attempt (a
zombie left running after a scheduler reset) is fenced out and rolled back, and a retry of a slot
already committed in this clear generation returns at once, saying which attempt committed,
without running its query again. An operator only holds its arguments and names its write plan
(:mod:`airflow_crashsafe.sql.plans`); :class:`~airflow_crashsafe.operators._sql_base.FencedSQLBase`
runs it.

Parameters follow the driver's style: ``%(name)s`` / ``%s`` on PostgreSQL, ``:name`` / ``?`` on
SQLite. Identifiers (tables, columns) are always quoted (see :mod:`airflow_crashsafe.sql.quoting`
for how to write ``schema.table`` and names containing dots); values are always bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_crashsafe.operators._sql_base import FencedSQLBase
from airflow_crashsafe.sql.plans import Params
from airflow_crashsafe.sql.plans.merge import MergePlan
from airflow_crashsafe.sql.plans.overwrite import OverwritePlan
from airflow_crashsafe.sql.plans.statements import StatementsPlan
from airflow_crashsafe.sql.quoting import parse_table_name, sqlite_quote

__all__ = ["FencedSQLOperator", "NaturalKeyMergeOperator", "PartitionOverwriteOperator"]


class PartitionOverwriteOperator(FencedSQLBase):
    """Replace exactly one partition of a table with a query's rows, once per slot.

    Deletes the rows where every ``partition`` column equals its value, then inserts the rows of
    ``sql`` (by column name, as the query names them), in one fenced transaction. Rows the query
    produces outside the partition raise :class:`~airflow_crashsafe.errors.PartitionMismatchError`
    and roll everything back: an overwrite that spills over would not be idempotent.

    :param conn_id: Airflow connection of the target database (postgres, sqlite, mysql or duckdb;
        docs/databases.md says what each guarantees).
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

    def lineage_sql(self) -> list[str]:
        return [_insert_into(self.target_table, self.sql)]

    def write_plan(self) -> OverwritePlan:
        return OverwritePlan.build(
            task_id=self.task_id,
            conn_id=self.conn_id,
            target_table=self.target_table,
            partition=self.partition,
            sql=self.sql,
            parameters=self.parameters,
        )


class NaturalKeyMergeOperator(FencedSQLBase):
    """Upsert a query's rows on a natural key, so a re-run updates rather than double-counts.

    Uses ``MERGE`` on PostgreSQL 15+, ``INSERT ... ON CONFLICT`` on older PostgreSQL, SQLite and
    DuckDB, ``INSERT ... ON DUPLICATE KEY UPDATE`` on MySQL/MariaDB.
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

    def lineage_sql(self) -> list[str]:
        return [_insert_into(self.target_table, self.sql)]

    def write_plan(self) -> MergePlan:
        return MergePlan.build(
            operator=type(self).__name__,
            task_id=self.task_id,
            conn_id=self.conn_id,
            target_table=self.target_table,
            sql=self.sql,
            natural_key=self.natural_key,
            update_columns=self.update_columns,
            parameters=self.parameters,
            allow_nondeterministic=self.allow_nondeterministic,
        )


class FencedSQLOperator(FencedSQLBase):
    """Run your own statements, in order, as one fenced transaction on ``target``.

    With mapping parameters (or none), the statements may use the fence's own values:
    ``%(crashsafe_token)s`` / ``%(crashsafe_try_number)s`` on PostgreSQL, ``:crashsafe_token`` /
    ``:crashsafe_try_number`` on SQLite, e.g. to store which attempt wrote a row. Without
    parameters, a statement that uses none of them runs exactly as written (``%`` stays literal);
    one that does is a parameterized query, so write ``%%`` for a literal ``%`` on PostgreSQL.
    Sequence parameters are passed to every statement as they are.

    Every table the statements change must roll back with the fence: on MySQL/MariaDB an InnoDB
    table (the tables are read from the statements; one whose tables cannot be read, such as a
    ``CALL``, needs ``tables``), on PostgreSQL neither a foreign nor an unlogged table
    (docs/databases.md, "Tables a fence can protect").

    :param sql: one statement, or a list run in order (one statement per item).
    :param target: what the statements write, naming the fence (usually the table).
    :param tables: the tables the statements change besides those written in them (``table`` or
        ``schema.table``), each checked before the write.
    """

    template_fields: Sequence[str] = ("sql", "target", "parameters", "slot_partition", "tables")

    def __init__(
        self,
        *,
        conn_id: str,
        sql: str | list[str],
        target: str,
        parameters: Params = None,
        slot_partition: str | None = None,
        tables: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conn_id=conn_id, slot_partition=slot_partition, **kwargs)
        self.sql = sql
        self.target = target
        self.parameters = parameters
        self.tables = tables

    def lineage_sql(self) -> list[str]:
        return [self.sql] if isinstance(self.sql, str) else list(self.sql)

    def write_plan(self) -> StatementsPlan:
        return StatementsPlan.build(
            task_id=self.task_id,
            sql=self.sql,
            target=self.target,
            parameters=self.parameters,
            tables=self.tables,
        )


def _insert_into(target_table: str, query: str) -> str:
    """What a write of ``query``'s rows into ``target_table`` reads and writes, as one statement.

    The table is quoted as crashsafe writes it (each part exact, case included).
    """
    table = ".".join(sqlite_quote(part) for part in parse_table_name(target_table).parts)
    return f"INSERT INTO {table} {query.strip().rstrip(';')}"
