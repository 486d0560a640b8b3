"""The dialect layer: sqlglot-generated SQL per engine, guarantees, and the dialect's own refusals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing.delta import delta_version, describe_version
from airflow_crashsafe.identity import Attempt
from airflow_crashsafe.sql.plans.portable import dialect_nondeterministic_calls, refuse_implicit_commits
from airflow_crashsafe.store.dialects import DIALECTS, dialect_named


def test_identifiers_are_quoted_the_way_each_engine_reads_them() -> None:
    """MySQL takes backticks (inner ones doubled), DuckDB double quotes; an injection stays one name."""
    assert dialect_named("mysql").ident("we`ird; DROP TABLE x") == "`we``ird; DROP TABLE x`"
    assert dialect_named("duckdb").ident('a"b') == '"a""b"'


def test_placeholders_are_the_drivers() -> None:
    """``:name`` becomes MySQLdb's %(name)s and DuckDB's $name."""
    sql = "SELECT issued_token FROM f WHERE dag_id = :dag_id"
    assert dialect_named("mysql").render(sql) == "SELECT issued_token FROM f WHERE dag_id = %(dag_id)s"
    assert dialect_named("duckdb").render(sql) == "SELECT issued_token FROM f WHERE dag_id = $dag_id"


def test_types_are_generated_for_the_engine() -> None:
    """PostgreSQL's TIMESTAMP becomes MySQL's DATETIME (no implicit ON UPDATE)."""
    ddl = dialect_named("mysql").render("CREATE TABLE t (a VARCHAR(191) NOT NULL, at TIMESTAMP)")
    assert ddl == "CREATE TABLE t (a VARCHAR(191) NOT NULL, at DATETIME)"


def test_every_missing_guarantee_comes_with_its_reason() -> None:
    """PostgreSQL lacks nothing; MySQL says why it has no adoption and no transactional DDL."""
    assert DIALECTS["postgresql"].guarantees.limits() == []
    said = dialect_named("mysql").describe_limits()
    assert "no adoption of an in-flight write (the write's statements run in one transaction" in said
    assert "no transactional DDL" in said
    assert "docs/databases.md" in said
    with pytest.raises(ConfigurationError, match="no SQL dialect 'oracle'"):
        dialect_named("oracle")


@pytest.mark.parametrize(
    "stmt", ["CREATE TABLE t (x INT)", "  drop table t", "ALTER TABLE t ADD y INT", "TRUNCATE t", "COMMIT"]
)
def test_statements_that_end_the_transaction_are_refused_on_mysql(stmt: str) -> None:
    """DDL and transaction control commit a MySQL write before its fence check: refused."""
    with pytest.raises(ConfigurationError, match="before the fence check"):
        refuse_implicit_commits("mysql", ["INSERT INTO t VALUES (1)", stmt], "task")
    refuse_implicit_commits("duckdb", [stmt], "task")  # transactional DDL there


def test_temporary_tables_and_comments_are_not_ddl() -> None:
    """CREATE TEMPORARY TABLE commits nothing; a comment before DML is not a statement keyword."""
    refuse_implicit_commits(
        "mysql", ["CREATE TEMPORARY TABLE t (x INT)", "-- drop\nINSERT INTO t VALUES (1)"], "t"
    )


def test_the_dialects_own_nondeterministic_functions_are_found() -> None:
    """RAND()/UUID()/SYSDATE() on MySQL, uuid()/random() on DuckDB; string literals do not count."""
    assert dialect_nondeterministic_calls("mysql", "SELECT RAND() AS r, UUID() AS u, SYSDATE() AS s") == [
        "rand()",
        "uuid()",
        "sysdate()",
    ]
    assert dialect_nondeterministic_calls("duckdb", "SELECT uuid() AS u, random() AS r") == [
        "uuid()",
        "random()",
    ]
    assert dialect_nondeterministic_calls("mysql", "SELECT 'RAND()' AS label, ABS(x) FROM t") == []


def _attempt(try_number: int, clear: int = 0, at: datetime | None = None) -> Attempt:
    started = at or datetime(2026, 12, 1, tzinfo=timezone.utc)
    return Attempt(try_number=try_number, ti_id="t", run_id="r", clear_number=clear, started_at=started)


def test_delta_versions_order_as_fencing_tokens() -> None:
    """Clear generation first, then try, then the later starter of one try."""
    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    older_try_later = delta_version(_attempt(1, at=t0 + timedelta(hours=1)))
    assert delta_version(_attempt(2, at=t0)) > older_try_later
    assert delta_version(_attempt(1, at=t0 + timedelta(seconds=1))) > delta_version(_attempt(1, at=t0))
    assert delta_version(_attempt(1, clear=1, at=t0)) > delta_version(_attempt(9, at=t0 + timedelta(days=1)))
    assert describe_version(delta_version(_attempt(3, clear=2))) == "clear 2, try 3"
