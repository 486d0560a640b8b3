"""The plumbing every fenced SQL operator shares: lazy connection, the fence, on_kill, the result.

A private module: the operators are public in :mod:`airflow_crashsafe.operators.sql`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.sql import checks
from airflow_crashsafe.sql.introspect import TableInfo, describe_table
from airflow_crashsafe.sql.quoting import TableName
from airflow_crashsafe.store.dbapi import Db, connect_target

if TYPE_CHECKING:
    from airflow_crashsafe.fencing import FencedTransaction

__all__ = ["FencedSQLBase", "Params", "source_columns"]

Params = Mapping[str, Any] | Sequence[Any] | None


class FencedSQLBase(BaseOperator):
    """Shared plumbing: lazy connection, the fenced transaction, ``on_kill`` and the result."""

    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "sql": "sql",
        "parameters": "json",
        "partition": "json",
    }
    ui_color = "#e8f0fe"
    # Set only while execute() runs, so that on_kill() (another thread or a signal) can cancel.
    _crashsafe_tx: FencedTransaction | None = None
    _crashsafe_db: Db | None = None

    def __init__(self, *, conn_id: str, slot_partition: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conn_id = conn_id
        self.slot_partition = slot_partition

    def on_kill(self) -> None:
        """Cancel the statement running now; the fenced transaction then rolls back."""
        tx, db = self._crashsafe_tx, self._crashsafe_db
        if tx is not None:
            self.log.info("crashsafe: on_kill: cancelling the running statement of %s", self.task_id)
            tx.cancel()
        elif db is not None:
            db.cancel()

    def _run_fenced(
        self,
        context: Mapping[str, Any],
        target: str,
        prepare: Callable[[Db], Any],
        body: Callable[[FencedTransaction, Any], dict[str, Any]],
    ) -> dict[str, Any]:
        """``prepare(db)`` (read-only checks, before any token), then ``body`` inside the fence."""
        db = connect_target(self.conn_id)
        self._crashsafe_db = db
        try:
            prepared = prepare(db)
            db.rollback()  # end the read-only catalog transaction before the fence starts its own
            with fenced_transaction(
                self.conn_id, target, context=context, slot_partition=self.slot_partition, db=db
            ) as tx:
                self._crashsafe_tx = tx
                if tx.committed_by is not None:  # tx.already_committed
                    by = tx.committed_by.describe()
                    self.log.info(
                        "crashsafe: %s (target %s) was already committed by %s in this clear "
                        "generation; not running the load again.",
                        tx.slot.describe(),
                        target,
                        by,
                    )
                    return {"rows": None, "token": None, "committed_by": by, "skipped": True}
                result = body(tx, prepared)
            return {**result, "token": tx.token, "committed_by": tx.attempt.describe(), "skipped": False}
        finally:
            self._crashsafe_tx = None
            self._crashsafe_db = None
            db.close()

    def _describe_target(self, db: Db, table: TableName, *, unique_keys: bool = True) -> TableInfo:
        info = describe_table(db, table, unique_keys=unique_keys)
        if info is None:
            raise checks.missing_table_error(table.display(), self.conn_id)
        return info


def source_columns(cursor: Any) -> list[str]:
    """Column names of the query just run; refuses duplicate names (which column would win?)."""
    names = [str(d[0]) for d in cursor.description or ()]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(
            f"The source query returns the column name(s) {dupes} more than once; alias them."
        )
    return names
