"""The fenced SQL operators' construction and the refusals that need no database."""

from __future__ import annotations

import pytest

from airflow_crashsafe.errors import ConfigurationError, NondeterministicSourceError
from airflow_crashsafe.operators import FencedSQLOperator, NaturalKeyMergeOperator, PartitionOverwriteOperator
from airflow_crashsafe.testing.context import fake_context

UNDEFINED = "crashsafe_connection_that_does_not_exist"


def test_init_holds_only_arguments_and_declares_template_fields() -> None:
    """Constructing an operator opens nothing and the templated fields are the documented ones."""
    op = PartitionOverwriteOperator(
        task_id="t",
        conn_id=UNDEFINED,
        target_table="x",
        partition={"d": 1},
        sql="SELECT 1",
        slot_partition="p",
    )
    assert set(PartitionOverwriteOperator.template_fields) == {
        "target_table",
        "partition",
        "sql",
        "parameters",
        "slot_partition",
    }
    assert set(NaturalKeyMergeOperator.template_fields) == {
        "target_table",
        "sql",
        "parameters",
        "slot_partition",
    }
    assert set(FencedSQLOperator.template_fields) == {"sql", "target", "parameters", "slot_partition"}
    assert op._crashsafe_tx is None
    op.on_kill()  # nothing running: a no-op


def test_empty_partition_is_refused_before_connecting() -> None:
    """An empty partition raises ConfigurationError before the (undefined) connection is even opened."""
    op = PartitionOverwriteOperator(
        task_id="t", conn_id=UNDEFINED, target_table="x", partition={}, sql="SELECT 1"
    )
    with pytest.raises(ConfigurationError, match="non-empty partition"):
        op.execute(fake_context())


def test_nondeterministic_merge_is_refused_before_connecting() -> None:
    """A merge source calling now() is refused before any connection is opened."""
    op = NaturalKeyMergeOperator(
        task_id="t", conn_id=UNDEFINED, target_table="x", sql="SELECT now() AS k", natural_key=["k"]
    )
    with pytest.raises(NondeterministicSourceError):
        op.execute(fake_context())


@pytest.mark.parametrize(("key", "update"), [([], None), (["a", "a"], None), (["a"], ["a", "b"])])
def test_bad_key_arguments_are_refused(key: list[str], update: list[str] | None) -> None:
    """An empty or repeated natural key, or update_columns overlapping it, is a configuration error."""
    op = NaturalKeyMergeOperator(
        task_id="t",
        conn_id=UNDEFINED,
        target_table="x",
        sql="SELECT 1",
        natural_key=key,
        update_columns=update,
    )
    with pytest.raises(ConfigurationError):
        op.execute(fake_context())


def test_fenced_sql_without_statements_is_refused() -> None:
    """An empty statement list is refused before connecting."""
    with pytest.raises(ConfigurationError, match="no SQL statements"):
        FencedSQLOperator(task_id="t", conn_id=UNDEFINED, sql=["  "], target="x").execute(fake_context())
