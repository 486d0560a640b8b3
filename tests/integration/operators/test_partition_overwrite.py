"""PartitionOverwriteOperator against real PostgreSQL 15 and SQLite, driven through execute()."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from airflow_crashsafe.errors import ConfigurationError, FencedOut, PartitionMismatchError
from airflow_crashsafe.operators import PartitionOverwriteOperator
from airflow_crashsafe.testing.context import fake_context
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

DAY = "2024-01-02"
SOURCE = "SELECT '2024-01-02' AS day, 'eu' AS region, 10 AS amount UNION ALL SELECT '2024-01-02', 'us', 20"


def _table(target: SqlTarget, name: str = "revenue", null: str = "NOT NULL") -> None:
    target.run(
        f"CREATE TABLE {name} (day TEXT {null}, region TEXT NOT NULL, amount INTEGER NOT NULL)",
        f"INSERT INTO {name} VALUES ('2024-01-01', 'eu', 1), ('2024-01-02', 'eu', 999), "
        "('2024-01-03', 'eu', 3)",
    )


def _op(target: SqlTarget, sql: str = SOURCE, **kwargs: Any) -> PartitionOverwriteOperator:
    kwargs.setdefault("target_table", "revenue")
    kwargs.setdefault("partition", {"day": DAY})
    return PartitionOverwriteOperator(task_id="load_revenue", conn_id=target.conn_id, sql=sql, **kwargs)


@pytest.mark.floor  # the floor subset's fenced write
def test_replaces_exactly_the_partition_and_is_idempotent(target: SqlTarget) -> None:
    """The partition's rows are replaced, other partitions untouched, and a cleared re-run changes nothing."""
    _table(target)
    result = _op(target).execute(fake_context(task_id="load_revenue"))
    assert result["rows"] == 2
    assert result["deleted"] == 1
    assert not result["skipped"]
    assert result["token"] == 1
    expected = [
        ("2024-01-01", "eu", 1),
        ("2024-01-02", "eu", 10),
        ("2024-01-02", "us", 20),
        ("2024-01-03", "eu", 3),
    ]
    assert target.rows("SELECT day, region, amount FROM revenue") == expected
    again = _op(target).execute(fake_context(task_id="load_revenue", try_number=2, clear_number=1))
    assert again["rows"] == 2
    assert target.rows("SELECT day, region, amount FROM revenue") == expected


def test_rows_outside_the_partition_raise_and_write_nothing(target: SqlTarget) -> None:
    """A source spilling outside the partition raises PartitionMismatchError and rolls back the DELETE too."""
    _table(target)
    before = target.rows("SELECT * FROM revenue")
    spill = SOURCE + " UNION ALL SELECT '2024-01-03', 'eu', 5 UNION ALL SELECT '2024-01-09', 'eu', 6"
    with pytest.raises(
        PartitionMismatchError, match=r"2 of 4 row\(s\) outside the partition \{'day': '2024-01-02'\}"
    ):
        _op(target, spill).execute(fake_context(task_id="load_revenue"))
    assert target.rows("SELECT * FROM revenue") == before
    assert target.committed_try("revenue") is None


def test_null_partition_column_in_source_is_outside(target: SqlTarget) -> None:
    """A source row whose partition column is NULL counts as outside the partition (NULL never matches)."""
    _table(target, null="NULL")
    with pytest.raises(PartitionMismatchError, match="1 of 3"):
        _op(target, SOURCE + " UNION ALL SELECT NULL, 'eu', 1").execute(fake_context(task_id="load_revenue"))


def test_source_without_partition_column_is_refused(target: SqlTarget) -> None:
    """A source that does not return a partition column cannot be checked and is refused, writing nothing."""
    _table(target)
    with pytest.raises(ConfigurationError, match=r"does not return the partition column\(s\) \['day'\]"):
        _op(target, "SELECT 'eu' AS region, 1 AS amount").execute(fake_context(task_id="load_revenue"))
    assert target.rows("SELECT count(*) FROM revenue") == [(3,)]


def test_source_division_by_zero_is_not_reported_as_a_mismatch(pg_target: SqlTarget) -> None:
    """The query's own division by zero surfaces as itself, not as a partition mismatch."""
    _table(pg_target)
    sql = "SELECT '2024-01-02' AS day, 'eu' AS region, 1 / (g - 2) AS amount FROM generate_series(1, 3) g"
    with pytest.raises(psycopg.errors.DivisionByZero):
        _op(pg_target, sql).execute(fake_context(task_id="load_revenue"))
    assert pg_target.rows("SELECT count(*) FROM revenue") == [(3,)]


def test_filtered_source_is_not_checked_before_its_own_where(pg_target: SqlTarget) -> None:
    """The guard sees only rows the source returns: a WHERE in the source on other days is honoured."""
    _table(pg_target)
    pg_target.run("CREATE TABLE staging AS SELECT * FROM revenue")
    sql = "SELECT day, region, amount + 100 AS amount FROM staging WHERE day = '2024-01-02'"
    assert _op(pg_target, sql).execute(fake_context(task_id="load_revenue"))["rows"] == 1
    assert pg_target.rows("SELECT amount FROM revenue WHERE day = '2024-01-02'") == [(1099,)]


def test_multi_column_partition_and_parameters(target: SqlTarget) -> None:
    """A two-column partition with bound parameters replaces only rows matching both columns."""
    _table(target)
    ph = "%(day)s" if target.is_postgres else ":day"
    sql = f"SELECT {ph} AS day, 'eu' AS region, 7 AS amount"
    op = _op(target, sql, partition={"day": DAY, "region": "eu"}, parameters={"day": DAY})
    assert op.execute(fake_context(task_id="load_revenue"))["rows"] == 1
    assert target.rows("SELECT day, region, amount FROM revenue WHERE day = '2024-01-02'") == [
        ("2024-01-02", "eu", 7)
    ]


def test_positional_parameters_and_rows_outside_the_partition_are_a_mismatch(target: SqlTarget) -> None:
    """Positional parameters: the stray-row diagnosis binds the user's values to the user's placeholders."""
    _table(target)
    ph = "%s" if target.is_postgres else "?"
    sql = f"SELECT '2024-01-02' AS day, 'eu' AS region, {ph} AS amount UNION ALL "
    sql += f"SELECT '2024-01-09', 'eu', {ph}"
    with pytest.raises(PartitionMismatchError, match=r"1 of 2 row\(s\) outside the partition"):
        _op(target, sql, parameters=[7, 8]).execute(fake_context(task_id="load_revenue"))
    assert target.committed_try("revenue") is None


def test_percent_in_source_without_parameters_stays_literal(target: SqlTarget) -> None:
    """A source written for no parameters keeps a literal % even though crashsafe binds its own values."""
    _table(target)
    sql = "SELECT '2024-01-02' AS day, '50%' AS region, 1 AS amount"
    _op(target, sql).execute(fake_context(task_id="load_revenue"))
    assert target.rows("SELECT region FROM revenue WHERE day = '2024-01-02'") == [("50%",)]


def test_retry_after_commit_returns_without_running_the_source(
    target: SqlTarget, caplog: pytest.LogCaptureFixture
) -> None:
    """Try 2 of a committed slot (same clear) returns at once, naming try 1, without touching the source."""
    _table(target)
    _op(target).execute(fake_context(task_id="load_revenue", try_number=1, ti_id="ti-one"))
    broken = "SELECT * FROM this_table_does_not_exist"
    with caplog.at_level("INFO"):
        result = _op(target, broken).execute(fake_context(task_id="load_revenue", try_number=2))
    assert result["skipped"] is True
    assert result["rows"] is None
    assert "try 1 (ti ti-one" in result["committed_by"]
    assert "already committed by try 1 (ti ti-one" in caplog.text
    assert target.committed_try("revenue") == 1


def test_after_a_clear_the_slot_runs_again(target: SqlTarget) -> None:
    """After a clear (clear_number + 1) the overwrite runs again and its new rows replace the partition."""
    _table(target)
    _op(target).execute(fake_context(task_id="load_revenue", try_number=1))
    changed = "SELECT '2024-01-02' AS day, 'eu' AS region, 11 AS amount"
    result = _op(target, changed).execute(fake_context(task_id="load_revenue", try_number=2, clear_number=1))
    assert result["skipped"] is False
    assert target.rows("SELECT amount FROM revenue WHERE day = '2024-01-02'") == [(11,)]
    assert target.committed_try("revenue") == 2


def test_missing_table_and_unknown_partition_column_are_clear_errors(target: SqlTarget) -> None:
    """A missing table or a partition column the table lacks fails before any token is issued."""
    with pytest.raises(ConfigurationError, match="does not exist"):
        _op(target).execute(fake_context(task_id="load_revenue"))
    _table(target)
    with pytest.raises(ConfigurationError, match=r"\['dt'\] are not columns of revenue"):
        _op(target, partition={"dt": DAY}).execute(fake_context(task_id="load_revenue"))
    assert target.fence_rows() == []


def test_injection_in_table_name_is_one_missing_identifier(target: SqlTarget) -> None:
    """A table name carrying SQL is one odd identifier: a clean 'does not exist', and nothing is dropped."""
    _table(target)
    _table(target, "victim")
    for name in ("revenue; DROP TABLE victim", 'revenue"; DROP TABLE victim; --', "victim --"):
        with pytest.raises(ConfigurationError, match="does not exist"):
            _op(target, target_table=name).execute(fake_context(task_id="load_revenue"))
    with pytest.raises(ConfigurationError, match="not columns"):
        _op(target, partition={"day = day; DROP TABLE victim; --": 1}).execute(fake_context(task_id="x"))
    assert target.rows("SELECT count(*) FROM victim") == [(3,)]


def test_odd_table_name_is_written_as_one_identifier(target: SqlTarget) -> None:
    """A real table whose name contains a quote, a semicolon and spaces is loaded like any other."""
    name = 'odd"; DROP TABLE victim; --'
    quoted = '"' + name.replace('"', '""') + '"'
    _table(target, quoted)
    _table(target, "victim")
    _op(target, target_table=name).execute(fake_context(task_id="load_revenue"))
    assert target.rows(f"SELECT amount FROM {quoted} WHERE day = '2024-01-02'") == [(10,), (20,)]
    assert target.rows("SELECT count(*) FROM victim") == [(3,)]


def test_schema_qualified_table(pg_target: SqlTarget) -> None:
    """``mart.revenue`` and a quoted dotted schema ``"my.mart".revenue`` reach the right tables."""
    pg_target.run("CREATE SCHEMA mart", 'CREATE SCHEMA "my.mart"')
    _table(pg_target, "mart.revenue")
    _table(pg_target, '"my.mart".revenue')
    _op(pg_target, target_table="mart.revenue").execute(fake_context(task_id="a"))
    _op(pg_target, target_table='"my.mart".revenue').execute(fake_context(task_id="b"))
    for table in ("mart.revenue", '"my.mart".revenue'):
        assert pg_target.rows(f"SELECT amount FROM {table} WHERE day = '2024-01-02'") == [(10,), (20,)]
    assert pg_target.committed_try('"my.mart".revenue') == 1


def _run_in_thread(
    op: PartitionOverwriteOperator, context: dict[str, Any]
) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            outcome["result"] = op.execute(context)
        except BaseException as exc:  # the test inspects it
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_for_statement(url: str, fragment: str, timeout: float = 10.0) -> None:
    """Block until a backend is running a statement containing ``fragment``."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s "
                "AND pid <> pg_backend_pid()",
                (f"%{fragment}%",),
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.02)
    raise AssertionError(f"no statement containing {fragment!r} started within {timeout}s")


def test_zombie_attempt_is_fenced_out(pg_target: SqlTarget) -> None:
    """Try 1, still in its long INSERT when try 2 (not adopting) starts and commits, is fenced out.

    Try 2's token makes try 1's in-flight unit stale, so try 2 cancels it at once instead of
    queueing behind it; try 1 reports FencedOut and leaves no rows.
    """
    _table(pg_target)
    slow = "SELECT '2024-01-02' AS day, %(tag)s AS region, 1 AS amount FROM pg_sleep(30)"
    zombie = _op(pg_target, slow, parameters={"tag": "try1"})
    thread, outcome = _run_in_thread(zombie, fake_context(task_id="load_revenue", try_number=1))
    _wait_for_statement(pg_target.url, "pg_sleep(30)")
    fresh = _op(pg_target, "SELECT '2024-01-02' AS day, 'try2' AS region, 2 AS amount", adopt_in_flight=False)
    started = time.monotonic()
    assert fresh.execute(fake_context(task_id="load_revenue", try_number=2))["skipped"] is False
    assert time.monotonic() - started < 10  # did not wait out the zombie's 30 s
    thread.join(10)
    assert isinstance(outcome.get("error"), FencedOut), outcome
    assert pg_target.rows("SELECT region FROM revenue WHERE day = '2024-01-02'") == [("try2",)]
    assert pg_target.committed_try("revenue") == 2


def test_on_kill_cancels_the_running_statement(pg_target: SqlTarget) -> None:
    """With on_kill_unit="cancel", on_kill cancels a 30 s source within about a second; nothing commits."""
    _table(pg_target)
    before = pg_target.rows("SELECT * FROM revenue")
    op = _op(
        pg_target,
        "SELECT '2024-01-02' AS day, 'x' AS region, 1 AS amount FROM pg_sleep(30)",
        on_kill_unit="cancel",
    )
    thread, outcome = _run_in_thread(op, fake_context(task_id="load_revenue"))
    _wait_for_statement(pg_target.url, "pg_sleep(30)")
    killed_at = time.monotonic()
    op.on_kill()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - killed_at < 1.5
    assert isinstance(outcome.get("error"), psycopg.errors.QueryCanceled), outcome
    assert pg_target.rows("SELECT * FROM revenue") == before
    assert pg_target.committed_try("revenue") is None


def test_on_kill_interrupts_a_running_sqlite_statement(sqlite_url: str, airflow_conn: Any) -> None:
    """On SQLite, on_kill interrupts a long statement promptly; nothing commits."""
    target = SqlTarget(conn_id=airflow_conn("crashsafe_target", sqlite_url), url=sqlite_url, dialect="sqlite")
    _table(target)
    slow = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) "
        "SELECT '2024-01-02' AS day, 'x' AS region, max(x) AS amount FROM c"
    )
    op = _op(target, slow)
    thread, outcome = _run_in_thread(op, fake_context(task_id="load_revenue"))
    deadline = time.monotonic() + 10
    while getattr(op._crashsafe_runner, "tx", None) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # into the INSERT
    killed_at = time.monotonic()
    op.on_kill()
    thread.join(5)
    assert not thread.is_alive()
    assert time.monotonic() - killed_at < 1.5
    assert "interrupted" in str(outcome.get("error")), outcome
    assert target.rows("SELECT count(*) FROM revenue") == [(3,)]
    assert target.committed_try("revenue") is None
