"""The fence's statements as MariaDB prepared statements: what goes over the wire, and when."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from airflow_crashsafe.store.dbapi import MYSQL, Db
from airflow_crashsafe.store.mariadb_prepared import run_prepared

SQL = "UPDATE t SET a = %(a)s, note = 'it''s 100%%' WHERE b = %(b)s AND c = %(a)s"


class Sent:
    """A stand-in for ``Db.execute_all``: records each round trip, may fail the next ones."""

    def __init__(self, *failures: Exception) -> None:
        self.trips: list[tuple[str, dict[str, Any], int]] = []
        self.failures = list(failures)

    def __call__(self, sql: str, params: Mapping[str, Any], result: int) -> str:
        self.trips.append((sql, dict(params), result))
        if self.failures:
            raise self.failures.pop(0)
        return f"answer {len(self.trips)}"


def _db() -> Db:
    return Db(raw=None, dialect=MYSQL)


def _used_once(db: Db, send: Sent) -> None:
    """The connection's first use of SQL: sent as text."""
    run_prepared(db, SQL, "", {"a": 0, "b": "w"}, send)
    send.trips.clear()


def test_first_use_is_text_second_prepares_in_the_same_round_trip_then_only_executes() -> None:
    db, send = _db(), Sent()
    assert run_prepared(db, SQL, "COMMIT", {"a": 0, "b": "w"}, send) == "answer 1"
    assert send.trips == [(f"{SQL}; COMMIT", {"a": 0, "b": "w"}, 0)]  # a write per connection: as ever
    assert db.sql_prepared == set()
    send.trips.clear()
    assert run_prepared(db, SQL, "COMMIT", {"a": 1, "b": "x"}, send) == "answer 1"
    assert run_prepared(db, SQL, "COMMIT", {"a": 2, "b": "y"}, send) == "answer 2"
    (first, params, result), (second, _, result2) = send.trips
    prepare, execute, commit = first.split("; ")
    name = prepare.split()[1]
    assert name.startswith("crashsafe_")
    # The text is a quoted literal: quotes doubled, the driver's % escaped, placeholders as ?.
    assert (
        prepare == f"PREPARE {name} FROM 'UPDATE t SET a = ?, note = ''it''''s 100%%'' WHERE b = ? AND c = ?'"
    )
    # Each placeholder in order, a repeated one repeated: USING is positional.
    assert execute == f"EXECUTE {name} USING %(a)s, %(b)s, %(a)s"
    assert commit == "COMMIT"
    assert (params, result) == ({"a": 1, "b": "x"}, 1)  # the EXECUTE's result follows PREPARE's
    assert (second, result2) == (f"EXECUTE {name} USING %(a)s, %(b)s, %(a)s; COMMIT", 0)
    assert db.sql_prepared == {name}


def test_the_filled_in_text_is_valid_pyformat() -> None:
    db, send = _db(), Sent()
    _used_once(db, send)
    run_prepared(db, SQL, "", {"a": 1, "b": "x"}, send)
    sql, params, _ = send.trips[0]
    filled = sql % {k: repr(v) for k, v in params.items()}  # what the driver does, literals aside
    assert "100%'' WHERE" in filled
    assert filled.endswith("USING 1, 'x', 1")


def test_a_statement_the_server_forgot_is_prepared_again() -> None:
    db, send = _db(), Sent()
    _used_once(db, send)
    run_prepared(db, SQL, "", {"a": 1, "b": "x"}, send)
    send.failures.append(Exception(1243, "Unknown prepared statement handler (crashsafe_…) given to EXECUTE"))
    assert run_prepared(db, SQL, "", {"a": 1, "b": "x"}, send) == "answer 3"
    assert [trip[0].split()[0] for trip in send.trips] == ["PREPARE", "EXECUTE", "PREPARE"]
    assert [trip[2] for trip in send.trips] == [1, 0, 1]


def test_other_errors_propagate_and_a_failed_first_use_prepares_again_next_time() -> None:
    db, send = _db(), Sent()
    _used_once(db, send)
    send.failures.append(Exception(1146, "Table 'crashsafe_fences' doesn't exist"))
    with pytest.raises(Exception, match="doesn't exist"):
        run_prepared(db, SQL, "", {"a": 1, "b": "x"}, send)
    assert db.sql_prepared == set()
    run_prepared(db, SQL, "", {"a": 1, "b": "x"}, send)
    assert send.trips[1][0].startswith("PREPARE ")
    send.failures.append(Exception(1205, "Lock wait timeout exceeded"))
    with pytest.raises(Exception, match="Lock wait"):
        run_prepared(db, SQL, "", {"a": 1, "b": "x"}, send)
    assert len(send.trips) == 3  # not retried: only a forgotten statement is


def test_a_backslash_is_refused() -> None:
    with pytest.raises(ValueError, match="backslash"):
        run_prepared(_db(), "SELECT '\\n' = %(a)s", "", {"a": 1}, Sent())
