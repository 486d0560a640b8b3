"""The fenced SQL operators' construction and the refusals that need no database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

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
    assert set(FencedSQLOperator.template_fields) == {
        "sql",
        "target",
        "parameters",
        "slot_partition",
        "tables",
    }
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


@pytest.mark.parametrize("key", [5, ["a", 5], [b"a"], None])
def test_natural_key_that_is_not_column_names_is_one_clear_error(key: object) -> None:
    """natural_key=5 (or a list holding a non-name) says what to give, not a TypeError traceback."""
    op = NaturalKeyMergeOperator(
        task_id="t", conn_id=UNDEFINED, target_table="x", sql="SELECT 1 AS a", natural_key=key
    )
    with pytest.raises(ConfigurationError, match=r"natural_key of 't' must be a column name or a list"):
        op.execute(fake_context())


def _overwrite(**kwargs: object) -> PartitionOverwriteOperator:
    kwargs.setdefault("partition", {"day": "2024-01-02"})
    kwargs.setdefault("sql", "SELECT 1 AS day")
    return PartitionOverwriteOperator(task_id="t", conn_id=UNDEFINED, target_table="x", **kwargs)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        pytest.param(
            lambda: _overwrite(partition={"day": "2024\x0001-02"}),
            r"partition value of 'day' .* contains a NUL byte",
            id="nul-partition",
        ),
        pytest.param(
            lambda: _overwrite(partition={"day": b"2024-01-02"}),
            r"partition value of 'day' .* is bytes: give text",
            id="bytes-partition",
        ),
        pytest.param(
            lambda: _overwrite(parameters={"day": "a\x00b"}),
            r"parameter 'day' .* contains a NUL byte",
            id="nul-named-parameter",
        ),
        pytest.param(
            lambda: _overwrite(parameters=["ok", ["x", "a\x00"]]),
            r"parameter 2 .* contains a NUL byte",
            id="nul-positional-parameter",
        ),
        pytest.param(
            lambda: NaturalKeyMergeOperator(
                task_id="t",
                conn_id=UNDEFINED,
                target_table="x",
                sql="SELECT 1 AS a",
                natural_key="a",
                parameters={"p": "\x00"},
            ),
            r"parameter 'p' .* contains a NUL byte",
            id="nul-merge-parameter",
        ),
        pytest.param(
            lambda: FencedSQLOperator(
                task_id="t", conn_id=UNDEFINED, sql="SELECT 1", target="x", parameters={"p": "\x00"}
            ),
            r"parameter 'p' .* contains a NUL byte",
            id="nul-statement-parameter",
        ),
        pytest.param(
            lambda: _overwrite(sql="SELECT '2024\x00' AS day"),
            r"The SQL of 't' contains a NUL byte",
            id="nul-sql",
        ),
        pytest.param(
            lambda: FencedSQLOperator(
                task_id="t", conn_id=UNDEFINED, sql=["SELECT 1", "SELECT '\x00'"], target="x"
            ),
            r"SQL statement 2 of 't' contains a NUL byte",
            id="nul-statement",
        ),
    ],
)
def test_nul_bytes_and_bytes_partition_values_are_refused_before_connecting(op: Any, message: str) -> None:
    """A NUL in a value, or a bytes partition value, is a one-line ConfigurationError, not a driver error."""
    with pytest.raises(ConfigurationError, match=message) as raised:
        op().execute(fake_context())
    assert "\n" not in str(raised.value)


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


def test_adoption_without_triggerer_is_wait_or_take_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """The argument and the [crashsafe] option accept "wait" or "take_over"; anything else is named."""
    from airflow_crashsafe import config

    with pytest.raises(ConfigurationError, match=r"adoption_without_triggerer='defer' of 't': choose one of"):
        _overwrite(adoption_without_triggerer="defer")
    assert _overwrite(adoption_without_triggerer="take_over").adoption_without_triggerer == "take_over"
    assert config.adoption_without_triggerer() == "wait"
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ADOPTION_WITHOUT_TRIGGERER", "sometimes")
    config.reset_cache()
    with pytest.raises(ConfigurationError, match="set it to 'wait' or 'take_over'"):
        config.adoption_without_triggerer()


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
