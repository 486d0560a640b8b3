"""The fenced SQL operators' construction and the refusals that need no database."""

from __future__ import annotations

from datetime import timedelta

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
    assert op._crashsafe_runner is None
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


def test_adoption_settings_default_to_the_crashsafe_options_where_the_task_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset arguments read [crashsafe] at run time; explicit arguments win; bad values are named."""
    from airflow_crashsafe import config

    op = PartitionOverwriteOperator(
        task_id="t", conn_id=UNDEFINED, target_table="x", partition={"d": 1}, sql="S"
    )
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ADOPT_IN_FLIGHT", "false")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ADOPTION_TIMEOUT_SECONDS", "90")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ON_KILL_UNIT", "cancel")
    config.reset_cache()
    assert (op._adopts(), op._adoption_timeout_seconds(), op._leaves_unit_on_kill()) == (False, 90.0, False)
    explicit = PartitionOverwriteOperator(
        task_id="u",
        conn_id=UNDEFINED,
        target_table="x",
        partition={"d": 1},
        sql="S",
        adopt_in_flight=True,
        adoption_timeout=timedelta(minutes=2),
        on_kill_unit="leave",
    )
    assert (explicit._adopts(), explicit._adoption_timeout_seconds(), explicit._leaves_unit_on_kill()) == (
        True,
        120.0,
        True,
    )
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ON_KILL_UNIT", "sometimes")
    config.reset_cache()
    with pytest.raises(ValueError, match="'leave' or 'cancel'"):
        op._leaves_unit_on_kill()
    config.reset_cache()
    with pytest.raises(ConfigurationError, match="on_kill_unit='never'"):
        PartitionOverwriteOperator(
            task_id="v",
            conn_id=UNDEFINED,
            target_table="x",
            partition={"d": 1},
            sql="S",
            on_kill_unit="never",
        )


def test_every_sql_operator_names_its_connection_field() -> None:
    """conn_id_field tells Airflow (and common.sql tooling) which argument is the connection."""
    for cls in (PartitionOverwriteOperator, NaturalKeyMergeOperator, FencedSQLOperator):
        assert cls.conn_id_field == "conn_id"


def test_each_dialect_gets_its_runner() -> None:
    """SQLite writes run client-driven; nothing of theirs can be in flight after the sender dies."""
    from airflow_crashsafe.fencing.runners import runner_for
    from airflow_crashsafe.fencing.runners.client import ClientRunner
    from airflow_crashsafe.store.dbapi import connect_url

    db = connect_url("sqlite:///:memory:")
    try:
        runner = runner_for(db)
        assert isinstance(runner, ClientRunner)
        assert (runner.in_flight_units, runner.unit_running) == (False, False)
    finally:
        db.close()
