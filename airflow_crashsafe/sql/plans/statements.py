"""The user's own statements, run in order as one fenced write.

With mapping parameters (or none), the statements may use the fence's own values
(``crashsafe_token``, ``crashsafe_try_number``), e.g. to store which attempt wrote a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.sql.fenceable import check_statement_tables
from airflow_crashsafe.sql.plans import OpenTransaction, Params, portable
from airflow_crashsafe.sql.plans.values import check_parameters, check_sql
from airflow_crashsafe.sql.unit_program import UnitFailure, UnitProgram, render_sql
from airflow_crashsafe.store.dbapi import Db

__all__ = ["StatementsPlan"]


@dataclass(frozen=True)
class StatementsPlan:
    """The statements of one task, non-empty, the fence target they write, and the tables they
    change if the task names them (``tables``: None when it does not)."""

    task_id: str
    target: str
    stmts: list[str]
    parameters: Params
    tables: list[str] | None = None

    @classmethod
    def build(
        cls,
        *,
        task_id: str,
        sql: str | list[str],
        target: str,
        parameters: Params,
        tables: list[str] | None = None,
    ) -> StatementsPlan:
        """Validate the arguments (before any connection is opened)."""
        stmts = [sql] if isinstance(sql, str) else list(sql or ())
        stmts = [s for s in stmts if s and s.strip()]
        if not stmts:
            raise ConfigurationError(f"FencedSQLOperator {task_id!r} got no SQL statements to run.")
        if not target:
            raise ConfigurationError(f"FencedSQLOperator {task_id!r} needs a target name for its fence.")
        check_parameters(parameters, task_id)
        check_sql(stmts, task_id)
        if tables is not None and (isinstance(tables, str) or not all(isinstance(t, str) for t in tables)):
            raise ConfigurationError(
                f"tables of {task_id!r} must be a list of table names, got {tables!r}: "
                "e.g. tables=['mart.revenue']."
            )
        return cls(task_id, str(target), stmts, parameters, None if tables is None else list(tables))

    def prepare(self, db: Db) -> None:
        """The statements are the user's own: refused only when one would end the fence early, or
        changes a table the fence cannot protect (:mod:`airflow_crashsafe.sql.fenceable`)."""
        portable.refuse_implicit_commits(db.dialect.name, self.stmts, self.task_id)
        check_statement_tables(db, self.stmts, self.target, self.tables, self.task_id)

    def unit(self, program: UnitProgram, db: Db, prepared: None) -> None:
        fence = {"crashsafe_token": program.token, "crashsafe_try_number": program.try_number}
        for stmt in self.stmts:
            params = self._params_with(stmt, fence, dialect="postgresql")
            program.execute(render_sql(db, stmt, params), count_as="rows", add=True)
        program.constants["statements"] = len(self.stmts)

    def transaction(self, tx: OpenTransaction, prepared: None) -> dict[str, Any]:
        rows = 0
        for stmt in self.stmts:
            params = self._params_with(stmt, tx.params, dialect=tx.db.dialect.name)
            if params is None:
                tx.cursor.execute(stmt)
            else:
                tx.cursor.execute(stmt, params)
            rows += portable.changed_rows(tx.db, tx.cursor)
        return {"rows": rows, "statements": len(self.stmts)}

    def data_error(self, failure: UnitFailure) -> Exception:
        return ConfigurationError(f"The statements of {self.task_id!r} failed a check ({failure.code}).")

    def _params_with(self, stmt: str, fence: Mapping[str, Any], *, dialect: str) -> Any:
        """The user's mapping merged with the fence's values; a sequence as is."""
        if isinstance(self.parameters, Mapping):
            return {**self.parameters, **fence}
        if self.parameters is not None:
            return self.parameters
        marker = {"duckdb": "$crashsafe_", "sqlite": ":crashsafe_"}.get(dialect, "%(crashsafe_")
        return dict(fence) if marker in stmt else None
