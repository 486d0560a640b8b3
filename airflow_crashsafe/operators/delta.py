"""Delta Lake writes fenced by the table itself: a partition overwrite and a natural-key merge.

The rows come from ``source``, a callable given the task context that returns Arrow data (any
object with ``__arrow_c_stream__``: a pyarrow or arro3 table, a polars frame, a record batch
reader). The slot is the Delta transaction's application id and the attempt's fencing token its
version (:mod:`airflow_crashsafe.fencing.delta`); like the SQL operators, an attempt also takes a
token in the crashsafe store when it starts. A stale attempt's commit is refused once a newer
attempt has started (the store's fence check, under whose lock the Delta commit runs) or committed
(Delta's optimistic concurrency), and a retry of a committed slot reads the table's ``txn`` state
and returns at once. Object stores work through ``storage_options``, passed to delta-rs as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing.delta import DeltaFence
from airflow_crashsafe.identity import attempt_from_context, current_context, slot_from_context

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["DeltaMergeOperator", "DeltaPartitionOverwriteOperator"]


def _literal(value: Any) -> str:
    """A SQL literal for a partition value in delta-rs's predicate (text quoted, quotes doubled)."""
    if value is None:
        raise ConfigurationError("A Delta partition value cannot be None; name a value.")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "'" + str(value).replace("'", "''") + "'"
    return repr(value)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _DeltaBase(BaseOperator):
    """A fenced write to the Delta table at ``table_uri``, once per slot."""

    template_fields: Sequence[str] = ("table_uri", "slot_partition")
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        table_uri: str,
        source: Callable[[Mapping[str, Any]], Any],
        storage_options: dict[str, str] | None = None,
        slot_partition: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not callable(source):
            raise ConfigurationError(
                f"source of {kwargs.get('task_id')!r} must be a callable taking the context and "
                "returning Arrow data (e.g. a pyarrow.Table)."
            )
        self.table_uri = table_uri
        self.source = source
        self.storage_options = storage_options
        self.slot_partition = slot_partition

    def _commit(self) -> Callable[[Any, Any, Any], None]:
        """``commit(table, data, commit_properties)``: this operator's Delta write of ``data``."""
        raise NotImplementedError

    def execute(self, context: Context) -> dict[str, Any]:
        """Write once per slot; the result says what was written or skipped."""
        ctx = current_context(context)
        slot, attempt = slot_from_context(ctx, self.slot_partition), attempt_from_context(ctx)
        fence = DeltaFence(self.table_uri, slot, self.table_uri, attempt, self.storage_options)
        outcome = fence.write(lambda: self.source(ctx), self._commit())
        return {
            "skipped": outcome.skipped,
            "token": outcome.token,
            "fence_token": outcome.fence_token,
            "committed_by": outcome.committed_by,
            "table_version": outcome.table_version,
            "delta_app_id": fence.app_id,
        }


class DeltaPartitionOverwriteOperator(_DeltaBase):
    """Replace one partition of a Delta table with ``source``'s rows, once per slot.

    Writes with ``mode="overwrite"`` and a predicate on the partition, so only that partition's
    files are replaced; rows of ``source`` outside it fail the write (delta-rs checks them).

    :param table_uri: the Delta table (a path, or an object-store URI with ``storage_options``).
    :param partition: ``{column: value}`` naming the partition.
    :param source: ``source(context)`` returns the partition's rows as Arrow data.
    :param partition_by: the table's partition columns, used when the write creates the table.
    """

    template_fields: Sequence[str] = ("table_uri", "partition", "slot_partition")

    def __init__(
        self,
        *,
        partition: Mapping[str, Any],
        partition_by: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(partition, Mapping) or not partition:
            raise ConfigurationError(
                f"DeltaPartitionOverwriteOperator {kwargs.get('task_id')!r} needs a non-empty partition "
                "{column: value}; without it the overwrite would replace the whole table."
            )
        self.partition = dict(partition)
        self.partition_by = partition_by

    def _commit(self) -> Callable[[Any, Any, Any], None]:
        from deltalake import write_deltalake

        predicate = " AND ".join(f"{_ident(c)} = {_literal(v)}" for c, v in self.partition.items())

        def commit(table: Any, data: Any, properties: Any) -> None:
            write_deltalake(
                table,
                data,
                mode="overwrite",
                predicate=predicate,
                partition_by=self.partition_by,
                commit_properties=properties,
            )

        return commit


class DeltaMergeOperator(_DeltaBase):
    """Upsert ``source``'s rows on a natural key into a Delta table, once per slot.

    A MERGE: matched rows are updated (all columns), new keys inserted, in one Delta commit.

    :param natural_key: the columns identifying a row in business terms.
    """

    def __init__(self, *, natural_key: list[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        key = [natural_key] if isinstance(natural_key, str) else list(natural_key or ())
        if not key:
            raise ConfigurationError(
                f"natural_key of {kwargs.get('task_id')!r} must name at least one column."
            )
        self.natural_key = key

    def _commit(self) -> Callable[[Any, Any, Any], None]:
        on = " AND ".join(f"t.{_ident(k)} = s.{_ident(k)}" for k in self.natural_key)

        def commit(table: Any, data: Any, properties: Any) -> None:
            merger = table.merge(
                data,
                predicate=on,
                source_alias="s",
                target_alias="t",
                commit_properties=properties,
            )
            merger.when_matched_update_all().when_not_matched_insert_all().execute()

        return commit
