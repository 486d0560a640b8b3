"""FencedSQLOperator against real PostgreSQL 15 and SQLite: your statements, fenced, once per slot."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_crashsafe.operators import FencedSQLOperator
from airflow_crashsafe.testing.context import fake_context
from airflow_crashsafe.testing.metrics import record_metrics
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

TABLE = "CREATE TABLE facts (k TEXT, token INTEGER, try_number INTEGER)"


def _op(target: SqlTarget, sql: str | list[str], **kwargs: Any) -> FencedSQLOperator:
    return FencedSQLOperator(task_id="facts", conn_id=target.conn_id, sql=sql, target="facts", **kwargs)


def _named(target: SqlTarget, name: str) -> str:
    return f"%({name})s" if target.is_postgres else f":{name}"


def test_statements_run_in_order_with_the_fence_parameters(target: SqlTarget) -> None:
    """Statements run in order in one transaction and can store the token and try they were written by."""
    target.run(TABLE)
    tok, tri = _named(target, "crashsafe_token"), _named(target, "crashsafe_try_number")
    stmts = [
        "DELETE FROM facts",
        f"INSERT INTO facts VALUES ('a', {tok}, {tri})",
        f"INSERT INTO facts VALUES ({_named(target, 'k')}, {tok}, {tri})",
    ]
    result = _op(target, stmts, parameters={"k": "b"}).execute(fake_context(task_id="facts", try_number=3))
    assert result == {
        "rows": 2,
        "statements": 3,
        "token": 1,
        "committed_by": result["committed_by"],
        "skipped": False,
    }
    assert result["committed_by"].startswith("try 3 ")
    assert target.rows("SELECT * FROM facts") == [("a", 1, 3), ("b", 1, 3)]


def test_a_failing_statement_rolls_back_the_earlier_ones(target: SqlTarget) -> None:
    """When the second statement fails, the first one's insert is rolled back and nothing is committed."""
    target.run(TABLE)
    with pytest.raises(Exception, match="no_such_table"):
        _op(target, ["INSERT INTO facts VALUES ('a', 0, 0)", "INSERT INTO no_such_table VALUES (1)"]).execute(
            fake_context(task_id="facts")
        )
    assert target.rows("SELECT count(*) FROM facts") == [(0,)]
    assert target.committed_try("facts") is None


def test_without_parameters_a_percent_stays_literal(target: SqlTarget) -> None:
    """With no parameters and no crashsafe placeholder, a statement runs exactly as written (% included)."""
    target.run(TABLE)
    _op(target, "INSERT INTO facts VALUES ('100%', 0, 0)").execute(fake_context(task_id="facts"))
    assert target.rows("SELECT k FROM facts") == [("100%",)]


def test_sequence_parameters_are_passed_as_they_are(target: SqlTarget) -> None:
    """Positional parameters reach the statement unchanged (no fence values merged into a sequence)."""
    target.run(TABLE)
    ph = "%s" if target.is_postgres else "?"
    _op(target, f"INSERT INTO facts VALUES ({ph}, {ph}, {ph})", parameters=["p", 7, 8]).execute(
        fake_context(task_id="facts")
    )
    assert target.rows("SELECT * FROM facts") == [("p", 7, 8)]


@pytest.mark.floor  # the floor subset's fenced write, retried after its commit
def test_retry_after_commit_does_not_run_the_statements_again(target: SqlTarget) -> None:
    """A retry of a committed slot runs nothing (the insert is not doubled); Stats counts both."""
    target.run(TABLE)
    insert = "INSERT INTO facts VALUES ('a', 0, 0)"
    with record_metrics() as sent:
        _op(target, insert).execute(fake_context(task_id="facts", try_number=1))
        result = _op(target, insert).execute(fake_context(task_id="facts", try_number=2))
    assert result["skipped"] is True
    assert [(s.kind, s.name) for s in sent.named()] == [
        ("incr", "crashsafe.fence.committed"),
        ("timing", "crashsafe.fence.write"),
        ("incr", "crashsafe.fence.skipped_committed"),
    ]
    assert target.rows("SELECT count(*) FROM facts") == [(1,)]
    _op(target, insert).execute(fake_context(task_id="facts", try_number=3, clear_number=1))
    assert target.rows("SELECT count(*) FROM facts") == [(2,)]


def test_slot_partition_separates_slots(target: SqlTarget) -> None:
    """An explicit slot_partition makes two runs of one date distinct slots (both commit)."""
    target.run(TABLE)
    insert = "INSERT INTO facts VALUES ('a', 0, 0)"
    for part in ("eu", "us"):
        assert not _op(target, insert, slot_partition=part).execute(fake_context(task_id="facts"))["skipped"]
    assert target.rows("SELECT count(*) FROM facts") == [(2,)]
