"""The fenced SQL operators' acceptance scenarios on every engine: PostgreSQL, SQLite, MariaDB, DuckDB
and Snowflake (through the provider's SnowflakeHook against the fakesnow emulator).

The fencing rules themselves (zombie after a newer commit, newest wins, later starter wins, clears)
run on every engine in ``tests/integration/fencing``; here: overwrite, MERGE re-runs never
double-count, a committed retry skips, and every refusal, written once in SQL all four accept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_crashsafe.errors import (
    ConfigurationError,
    DuplicateSourceKeysError,
    GeneratedKeyError,
    NaturalKeyNotUniqueError,
    NondeterministicSourceError,
    PartitionMismatchError,
)
from airflow_crashsafe.operators import (
    FencedSQLOperator,
    NaturalKeyMergeOperator,
    PartitionOverwriteOperator,
)
from airflow_crashsafe.testing.context import fake_context
from tests.support.sql_target import SqlTarget, overwrite_revenue

pytestmark = pytest.mark.integration

# VARCHAR, not TEXT: MySQL cannot index TEXT without a prefix length.
REVENUE = (
    "CREATE TABLE revenue (day VARCHAR(10) NOT NULL, region VARCHAR(8) NOT NULL, amount INTEGER NOT NULL)"
)
SEED = (
    "INSERT INTO revenue VALUES ('2024-01-01', 'eu', 1), ('2024-01-02', 'eu', 999), ('2024-01-03', 'eu', 3)"
)
DAY_ROWS = "SELECT '2024-01-02' AS day, 'eu' AS region, 10 AS amount UNION ALL SELECT '2024-01-02', 'us', 20"
TOTALS = (
    "CREATE TABLE totals (customer VARCHAR(8) NOT NULL, day VARCHAR(10) NOT NULL, amount INTEGER, "
    "note VARCHAR(8))"
)
UNIQUE = "CREATE UNIQUE INDEX totals_key ON totals (customer, day)"
# Snowflake has no unique indexes; a declared (not enforced) key names the row's identity.
SNOWFLAKE_UNIQUE = "ALTER TABLE totals ADD PRIMARY KEY (customer, day)"


def _unique(target: SqlTarget) -> str:
    return SNOWFLAKE_UNIQUE if target.dialect == "snowflake" else UNIQUE


SOURCE = "SELECT 'c1' AS customer, '2024-01-02' AS day, 10 AS amount UNION ALL SELECT 'c2', '2024-01-02', 20"


def _overwrite(target: SqlTarget, sql: str = DAY_ROWS) -> PartitionOverwriteOperator:
    return overwrite_revenue(target, sql)


def _merge(target: SqlTarget, sql: str = SOURCE, **kwargs: Any) -> NaturalKeyMergeOperator:
    kwargs.setdefault("natural_key", ["customer", "day"])
    return NaturalKeyMergeOperator(
        task_id="merge", conn_id=target.conn_id, target_table="totals", sql=sql, **kwargs
    )


def _totals(target: SqlTarget) -> list[tuple[Any, ...]]:
    return target.rows("SELECT customer, day, amount, note FROM totals")


def test_overwrite_replaces_the_partition_and_a_committed_retry_skips(engine_target: SqlTarget) -> None:
    """The partition's rows are replaced, others kept; try 2 of the committed slot runs nothing."""
    target = engine_target
    target.run(REVENUE, SEED)
    result = _overwrite(target).execute(fake_context(task_id="load"))
    assert (result["rows"], result["deleted"], result["skipped"]) == (2, 1, False)
    expected = [
        ("2024-01-01", "eu", 1),
        ("2024-01-02", "eu", 10),
        ("2024-01-02", "us", 20),
        ("2024-01-03", "eu", 3),
    ]
    assert target.rows("SELECT day, region, amount FROM revenue") == expected
    retry = _overwrite(target, "SELECT * FROM no_such_table").execute(
        fake_context(task_id="load", try_number=2)
    )
    assert retry["skipped"] is True
    assert retry["committed_by"].startswith("try 1 ")
    assert target.rows("SELECT day, region, amount FROM revenue") == expected
    assert target.committed_try("revenue") == 1


def test_overwrite_rows_outside_the_partition_write_nothing(engine_target: SqlTarget) -> None:
    """A source row outside the partition raises PartitionMismatchError and rolls everything back."""
    target = engine_target
    target.run(REVENUE, SEED)
    stray = DAY_ROWS + " UNION ALL SELECT '2024-01-05', 'eu', 5"
    with pytest.raises(PartitionMismatchError, match="1 of 3 row"):
        _overwrite(target, stray).execute(fake_context(task_id="load"))
    assert target.rows("SELECT amount FROM revenue") == [(1,), (3,), (999,)]
    assert target.committed_try("revenue") is None


def test_merge_rerun_never_double_counts(engine_target: SqlTarget) -> None:
    """New keys inserted, existing updated; a cleared re-run rewrites nothing; a changed row updates once."""
    target = engine_target
    target.run(
        TOTALS,
        _unique(target),
        "INSERT INTO totals VALUES ('c1', '2024-01-02', 1, 'keep'), ('c9', '2024-01-01', 9, 'x')",
    )
    first = _merge(target).execute(fake_context(task_id="merge"))
    assert (first["rows"], first["source_rows"]) == (2, 2)
    expected = [
        ("c1", "2024-01-02", 10, "keep"),
        ("c2", "2024-01-02", 20, None),
        ("c9", "2024-01-01", 9, "x"),
    ]
    assert _totals(target) == expected
    again = _merge(target).execute(fake_context(task_id="merge", try_number=2, clear_number=1))
    assert again["rows"] == 0
    assert _totals(target) == expected
    changed = SOURCE.replace("'2024-01-02', 20", "'2024-01-02', 21")
    third = _merge(target, changed).execute(fake_context(task_id="merge", try_number=3, clear_number=2))
    assert third["rows"] == 1
    assert sum(r[2] for r in _totals(target)) == 10 + 21 + 9


def test_merge_refuses_a_key_without_unique_index(engine_target: SqlTarget) -> None:
    """A natural key no unique index backs is refused, naming the index to create; nothing is written."""
    target = engine_target
    target.run(TOTALS)
    with pytest.raises(NaturalKeyNotUniqueError, match=r"CREATE UNIQUE INDEX|ADD PRIMARY KEY"):
        _merge(target).execute(fake_context(task_id="merge"))
    assert target.fence_rows() == []


def test_merge_refuses_a_generated_key(engine_target: SqlTarget) -> None:
    """An auto-assigned key (serial, AUTO_INCREMENT, INTEGER PRIMARY KEY, a sequence) is refused."""
    target = engine_target
    key = {
        "postgresql": "SERIAL PRIMARY KEY",
        "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT",
        "mariadb": "INTEGER AUTO_INCREMENT PRIMARY KEY",
        "duckdb": "INTEGER PRIMARY KEY DEFAULT nextval('totals_seq')",
        "snowflake": "INTEGER AUTOINCREMENT PRIMARY KEY",
    }[target.dialect]
    if target.dialect == "duckdb":
        target.run("CREATE SEQUENCE totals_seq")
    target.run(f"CREATE TABLE totals (id {key}, amount INTEGER)")
    with pytest.raises(GeneratedKeyError, match="business key"):
        _merge(target, "SELECT 1 AS id, 5 AS amount", natural_key=["id"]).execute(fake_context(task_id="m"))
    assert target.rows("SELECT count(*) FROM totals") == [(0,)]


def test_merge_refuses_repeated_and_null_source_keys(engine_target: SqlTarget) -> None:
    """Repeated keys are named with their counts, NULL keys refused; nothing is written either time."""
    target = engine_target
    target.run(TOTALS.replace("customer VARCHAR(8) NOT NULL", "customer VARCHAR(8)"), _unique(target))
    dupes = SOURCE + " UNION ALL SELECT 'c1', '2024-01-02', 11"
    with pytest.raises(DuplicateSourceKeysError, match=r"'customer': 'c1', 'day': '2024-01-02'\} x2"):
        _merge(target, dupes).execute(fake_context(task_id="merge"))
    with pytest.raises(DuplicateSourceKeysError, match="NULL"):
        _merge(target, SOURCE + " UNION ALL SELECT NULL, '2024-01-02', 1").execute(fake_context(task_id="m2"))
    assert _totals(target) == []


def test_merge_refuses_a_nondeterministic_source_in_the_dialect(engine_target: SqlTarget) -> None:
    """A source calling the engine's own random/uuid function is refused unless allowed."""
    target = engine_target
    note = {
        "postgresql": "CAST(floor(random() * 10) AS VARCHAR(8))",
        "sqlite": "CAST(abs(random()) % 10 AS TEXT)",
        "mariadb": "CAST(FLOOR(RAND() * 10) AS CHAR)",
        "duckdb": "substr(CAST(uuid() AS VARCHAR), 1, 8)",
        "snowflake": "SUBSTR(UUID_STRING(), 1, 8)",
    }[target.dialect]
    target.run(TOTALS, _unique(target))
    sql = f"SELECT 'c1' AS customer, '2024-01-02' AS day, 1 AS amount, {note} AS note"
    with pytest.raises(NondeterministicSourceError, match="allow_nondeterministic=True"):
        _merge(target, sql).execute(fake_context(task_id="merge"))
    assert _totals(target) == []
    assert (
        _merge(target, sql, allow_nondeterministic=True).execute(fake_context(task_id="merge"))["rows"] == 1
    )


def test_missing_table_is_a_clear_error(engine_target: SqlTarget) -> None:
    """Writing to a table that does not exist says so, on every engine."""
    target = engine_target
    with pytest.raises(ConfigurationError, match="Target table totals does not exist"):
        _merge(target).execute(fake_context(task_id="merge"))


def test_injection_in_a_table_name_is_one_missing_identifier(engine_target: SqlTarget) -> None:
    """A table 'name' carrying SQL is quoted as one identifier by the engine's quoting; nothing is dropped."""
    target = engine_target
    target.run(REVENUE, SEED)
    op = PartitionOverwriteOperator(
        task_id="load",
        conn_id=target.conn_id,
        target_table="revenue; DROP TABLE revenue",
        partition={"day": "2024-01-02"},
        sql=DAY_ROWS,
    )
    with pytest.raises(ConfigurationError, match="does not exist"):
        op.execute(fake_context(task_id="load"))
    assert target.rows("SELECT count(*) FROM revenue") == [(3,)]


def test_fenced_statements_run_once_with_the_token(engine_target: SqlTarget) -> None:
    """FencedSQLOperator's statements see the fence's token; a committed retry skips them."""
    target = engine_target
    target.run("CREATE TABLE audit_log (token INTEGER, try_number INTEGER)")
    placeholder = {
        "postgresql": "%({})s",
        "mariadb": "%({})s",
        "sqlite": ":{}",
        "duckdb": "${}",
        "snowflake": "%({})s",
    }[target.dialect]
    sql = "INSERT INTO audit_log VALUES ({}, {})".format(
        placeholder.format("crashsafe_token"), placeholder.format("crashsafe_try_number")
    )
    op = FencedSQLOperator(task_id="stmts", conn_id=target.conn_id, sql=[sql, sql], target="audit_log")
    result = op.execute(fake_context(task_id="stmts"))
    assert (result["rows"], result["statements"]) == (2, 2)
    assert op.execute(fake_context(task_id="stmts", try_number=2))["skipped"] is True
    assert target.rows("SELECT token, try_number FROM audit_log") == [(result["token"], 1)] * 2


def test_ddl_in_fenced_statements_is_refused_on_mariadb(
    mariadb_url: str, airflow_conn: Callable[[str, str], str]
) -> None:
    """MySQL/MariaDB commit DDL implicitly, so a fenced statement list holding DDL is refused up front."""
    target = SqlTarget(
        conn_id=airflow_conn("crashsafe_target", mariadb_url), url=mariadb_url, dialect="mariadb"
    )
    op = FencedSQLOperator(
        task_id="stmts", conn_id=target.conn_id, sql=["CREATE TABLE t1 (x INTEGER)"], target="t1"
    )
    with pytest.raises(ConfigurationError, match="starts with CREATE"):
        op.execute(fake_context(task_id="stmts"))
    assert not target.has_table("t1")
    temporary = FencedSQLOperator(
        task_id="tmp", conn_id=target.conn_id, sql=["CREATE TEMPORARY TABLE t2 (x INTEGER)"], target="t2"
    )
    assert temporary.execute(fake_context(task_id="tmp"))["skipped"] is False


def test_ddl_in_fenced_statements_is_refused_on_snowflake(
    snowflake_url: str, airflow_conn: Callable[[str, str], str]
) -> None:
    """Snowflake commits before any DDL, a temporary table's too: such a statement list is refused."""
    from airflow_crashsafe.testing.fakesnow import airflow_uri

    conn_id = airflow_conn("crashsafe_target", airflow_uri(snowflake_url))
    target = SqlTarget(conn_id=conn_id, url=snowflake_url, dialect="snowflake")
    for stmt in ("CREATE TABLE t1 (x INTEGER)", "CREATE TEMPORARY TABLE t1 (x INTEGER)"):
        op = FencedSQLOperator(task_id="stmts", conn_id=conn_id, sql=[stmt], target="t1")
        with pytest.raises(ConfigurationError, match="on Snowflake it commits"):
            op.execute(fake_context(task_id="stmts"))
    assert not target.has_table("t1")


class _Log:
    """Stands in for an operator's logger, keeping its warnings."""

    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: Any) -> None:
        self.warnings.append(message % args if args else message)

    def info(self, *args: Any, **kwargs: Any) -> None:
        return None

    debug = error = exception = info


def test_the_operator_says_what_the_engine_cannot_guarantee(
    engine_target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MariaDB and DuckDB targets log, at start, that a reset re-run cannot adopt an in-flight write."""
    target = engine_target
    target.run(REVENUE)
    log = _Log()
    monkeypatch.setattr(PartitionOverwriteOperator, "log", property(lambda self: log))
    _overwrite(target).execute(fake_context(task_id="load"))
    said = " ".join(log.warnings)
    if target.dialect in ("postgresql", "sqlite"):
        assert "no adoption" not in said
    else:
        assert "no adoption of an in-flight write" in said
        assert ("no transactional DDL" in said) == (target.dialect in ("mariadb", "snowflake"))
        assert ("no row locks" in said) == (target.dialect in ("duckdb", "snowflake"))
