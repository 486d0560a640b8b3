"""NaturalKeyMergeOperator against real PostgreSQL 15 and SQLite: upserts, and every refusal."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_crashsafe.errors import (
    ConfigurationError,
    DuplicateSourceKeysError,
    GeneratedKeyError,
    NaturalKeyNotUniqueError,
    NondeterministicSourceError,
)
from airflow_crashsafe.operators import NaturalKeyMergeOperator
from airflow_crashsafe.sql.plans import merge as merge_plan
from airflow_crashsafe.testing.context import fake_context
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

SOURCE = "SELECT 'c1' AS customer, '2024-01-02' AS day, 10 AS amount UNION ALL SELECT 'c2', '2024-01-02', 20"
TABLE = "CREATE TABLE totals (customer TEXT NOT NULL, day TEXT NOT NULL, amount INTEGER, note TEXT)"
UNIQUE = "CREATE UNIQUE INDEX totals_key ON totals (customer, day)"


def _op(target: SqlTarget, sql: str = SOURCE, **kwargs: Any) -> NaturalKeyMergeOperator:
    kwargs.setdefault("target_table", "totals")
    kwargs.setdefault("natural_key", ["customer", "day"])
    return NaturalKeyMergeOperator(task_id="merge_totals", conn_id=target.conn_id, sql=sql, **kwargs)


def _totals(target: SqlTarget) -> list[tuple[Any, ...]]:
    return target.rows("SELECT customer, day, amount, note FROM totals")


def _upsert_twice(target: SqlTarget) -> None:
    seed = "INSERT INTO totals VALUES ('c1', '2024-01-02', 1, 'keep'), ('c9', '2024-01-01', 9, 'x')"
    target.run(TABLE, UNIQUE, seed)
    result = _op(target).execute(fake_context(task_id="merge_totals"))
    assert result["rows"] == 2
    assert result["source_rows"] == 2
    expected = [
        ("c1", "2024-01-02", 10, "keep"),
        ("c2", "2024-01-02", 20, None),
        ("c9", "2024-01-01", 9, "x"),
    ]
    assert _totals(target) == expected
    again = _op(target).execute(fake_context(task_id="merge_totals", try_number=2, clear_number=1))
    assert again["rows"] == 0  # nothing differs, nothing rewritten
    assert _totals(target) == expected


def test_merge_upserts_and_a_rerun_does_not_double_count(target: SqlTarget) -> None:
    """New keys are inserted, existing keys updated, and a cleared re-run leaves every row as it was."""
    _upsert_twice(target)


def test_on_conflict_path_on_older_postgres(pg_target: SqlTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL below 15 (simulated) upserts through INSERT ... ON CONFLICT with the same results."""
    monkeypatch.setattr(merge_plan, "_MERGE_MIN_PG", 10**9)
    _upsert_twice(pg_target)


def test_update_columns_limits_what_a_match_changes(target: SqlTarget) -> None:
    """With update_columns, a matched row changes only those columns; inserts still carry every column."""
    target.run(TABLE, UNIQUE, "INSERT INTO totals VALUES ('c1', '2024-01-02', 1, 'old')")
    sql = "SELECT 'c1' AS customer, '2024-01-02' AS day, 5 AS amount, 'new' AS note"
    _op(target, sql, update_columns=["amount"]).execute(fake_context(task_id="merge_totals"))
    assert _totals(target) == [("c1", "2024-01-02", 5, "old")]


def test_key_without_unique_index_is_refused_naming_the_index(target: SqlTarget) -> None:
    """No unique index on exactly the key: refused naming the CREATE UNIQUE INDEX; nothing written."""
    target.run(TABLE, "CREATE UNIQUE INDEX totals_customer ON totals (customer)")
    with pytest.raises(
        NaturalKeyNotUniqueError,
        match=r'CREATE UNIQUE INDEX "totals_natural_key" ON "totals" \("customer", "day"\)',
    ):
        _op(target).execute(fake_context(task_id="merge_totals"))
    assert _totals(target) == []
    assert target.fence_rows() == []


def test_partial_unique_index_is_not_enough(target: SqlTarget) -> None:
    """A partial unique index on the key columns cannot arbitrate ON CONFLICT and is refused, saying why."""
    target.run(TABLE, "CREATE UNIQUE INDEX totals_part ON totals (customer, day) WHERE amount > 0")
    with pytest.raises(NaturalKeyNotUniqueError, match="totals_part covers these columns but is partial"):
        _op(target).execute(fake_context(task_id="merge_totals"))


@pytest.mark.parametrize(
    ("ddl", "reason"),
    [
        ("CREATE TABLE totals (id {serial}, amount INTEGER)", "{serial_reason}"),
        ("CREATE TABLE totals (id TEXT DEFAULT ({uuid}) PRIMARY KEY, amount INTEGER)", "calls"),
    ],
    ids=["serial_or_rowid", "random_default"],
)
def test_generated_key_is_refused(target: SqlTarget, ddl: str, reason: str) -> None:
    """A generated surrogate key (serial, INTEGER PRIMARY KEY, random default) is refused as natural key."""
    serial = "SERIAL PRIMARY KEY" if target.is_postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
    uuid = "gen_random_uuid()::text" if target.is_postgres else "lower(hex(randomblob(16)))"
    serial_reason = "nextval" if target.is_postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
    target.run(ddl.format(serial=serial, uuid=uuid))
    with pytest.raises(GeneratedKeyError, match=reason.format(serial_reason=serial_reason)) as err:
        _op(target, "SELECT 1 AS id, 5 AS amount", natural_key=["id"]).execute(fake_context(task_id="m"))
    assert "business key" in str(err.value)
    assert target.rows("SELECT count(*) FROM totals") == [(0,)]
    assert target.fence_rows() == []


def test_identity_and_generated_columns_are_refused(pg_target: SqlTarget) -> None:
    """PostgreSQL identity and GENERATED ALWAYS AS key columns are surrogate keys too."""
    pg_target.run(
        "CREATE TABLE totals (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, amount INTEGER,"
        " g INTEGER GENERATED ALWAYS AS (amount * 2) STORED UNIQUE)"
    )
    with pytest.raises(GeneratedKeyError, match="identity column"):
        _op(pg_target, "SELECT 1 AS id, 5 AS amount", natural_key=["id"]).execute(fake_context(task_id="m"))
    with pytest.raises(GeneratedKeyError, match="GENERATED ALWAYS AS"):
        _op(pg_target, "SELECT 1 AS g, 5 AS amount", natural_key=["g"]).execute(fake_context(task_id="m"))


def test_duplicate_source_keys_are_refused_with_counts(target: SqlTarget) -> None:
    """Repeated natural keys in the source are named with their counts and nothing is written."""
    target.run(TABLE, UNIQUE)
    dupes = SOURCE + " UNION ALL SELECT 'c1', '2024-01-02', 11 UNION ALL SELECT 'c1', '2024-01-02', 12"
    with pytest.raises(
        DuplicateSourceKeysError, match=r"1 natural key.*'customer': 'c1', 'day': '2024-01-02'\} x3"
    ):
        _op(target, dupes).execute(fake_context(task_id="merge_totals"))
    assert _totals(target) == []
    assert target.committed_try("totals") is None


def test_null_source_keys_are_refused(target: SqlTarget) -> None:
    """A NULL in a natural-key column of the source is refused (NULL never matches, so it would re-insert)."""
    target.run("CREATE TABLE totals (customer TEXT, day TEXT, amount INTEGER, note TEXT)", UNIQUE)
    with pytest.raises(DuplicateSourceKeysError, match=r"1 row.*NULL"):
        _op(target, SOURCE + " UNION ALL SELECT NULL, '2024-01-02', 1").execute(fake_context(task_id="m"))
    assert _totals(target) == []


def test_nondeterministic_source_is_refused_unless_allowed(target: SqlTarget) -> None:
    """A source calling a clock function is refused naming it and the flag; the flag lets it through."""
    target.run(TABLE, UNIQUE)
    clock = "now()::text" if target.is_postgres else "datetime('now')"
    sql = f"SELECT 'c1' AS customer, '2024-01-02' AS day, 1 AS amount, {clock} AS note"
    with pytest.raises(NondeterministicSourceError, match="allow_nondeterministic=True") as err:
        _op(target, sql).execute(fake_context(task_id="merge_totals"))
    assert ("now()" if target.is_postgres else "datetime('now')") in str(err.value)
    assert _totals(target) == []
    assert (
        _op(target, sql, allow_nondeterministic=True).execute(fake_context(task_id="merge_totals"))["rows"]
        == 1
    )


def test_missing_target_table_is_a_clear_error(target: SqlTarget) -> None:
    """Merging into a table that does not exist says so and how to fix it."""
    with pytest.raises(ConfigurationError, match="Target table totals does not exist"):
        _op(target).execute(fake_context(task_id="merge_totals"))


def test_retry_after_commit_skips_the_source(target: SqlTarget) -> None:
    """A retry of a committed merge (same clear) returns the committing attempt without running the source."""
    target.run(TABLE, UNIQUE)
    _op(target).execute(fake_context(task_id="merge_totals", try_number=1))
    result = _op(target, "SELECT * FROM no_such_source").execute(
        fake_context(task_id="merge_totals", try_number=2)
    )
    assert result["skipped"] is True
    assert result["committed_by"].startswith("try 1 ")


def test_injection_in_key_names_is_refused_as_unknown_columns(target: SqlTarget) -> None:
    """A natural-key 'column' carrying SQL is an unknown column name; nothing runs and nothing is dropped."""
    target.run(TABLE, UNIQUE, "CREATE TABLE victim (x INTEGER)")
    with pytest.raises(ConfigurationError, match="not columns of totals"):
        _op(target, natural_key=["customer", "day); DROP TABLE victim; --"]).execute(
            fake_context(task_id="m")
        )
    assert target.rows("SELECT count(*) FROM victim") == [(0,)]
