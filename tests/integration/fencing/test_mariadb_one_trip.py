"""MariaDB through each MySQL client: the fence's statements in their one-round-trip forms keep the rules."""

from __future__ import annotations

import uuid

import pytest

from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db, connect_url

pytestmark = pytest.mark.integration


def _attempt(try_number: int) -> Attempt:
    return Attempt(try_number=try_number, ti_id=str(uuid.uuid4()), run_id="r", clear_number=0)


def test_one_trip_commit_commits_only_while_the_token_is_newest(mariadb_client_url: str) -> None:
    """The token's upsert+COMMIT and the check+COMMIT compound: a stale token leaves its write uncommitted."""
    slot = Slot("one_trip", "load", -1, uuid.uuid4().hex)
    db, other = connect_url(mariadb_client_url), connect_url(mariadb_client_url)
    try:
        assert db.multi_statements
        assert db.compound_statements
        with db.autocommit():
            db.execute("CREATE TABLE out_rows (v INTEGER)")
        old, new = _attempt(1), _attempt(2)
        stale = fences.issue_token(db, slot, "out_rows", old).token
        assert stale == 1
        assert fences.issue_token(other, slot, "out_rows", new).token == 2  # committed: seen by the next
        db.begin()
        db.execute("INSERT INTO out_rows (v) VALUES (1)")
        assert not fences.commit_write(db, slot, "out_rows", old, stale)
        assert db.execute("SELECT count(*) FROM out_rows").fetchone()[0] == 1  # still open, not committed
        db.rollback()
        other.begin()
        other.execute("INSERT INTO out_rows (v) VALUES (2)")
        assert fences.commit_write(other, slot, "out_rows", new, 2)
        assert [r[0] for r in db.execute("SELECT v FROM out_rows").fetchall()] == [2]
        db.rollback()
        state = fences.read_fence(db, slot, "out_rows")
        assert state is not None
        assert state.committed is not None
        assert state.committed.token == 2
        retry = fences.issue_token(db, slot, "out_rows", _attempt(2))
        assert retry.token is None
        assert retry.already_committed is not None  # committed means done
    finally:
        db.close()
        other.close()


def _prepares_and_executes(db: Db) -> tuple[int, int]:
    """This session's SQL PREPAREs and EXECUTEs so far."""
    rows = dict(
        db.execute(
            "SHOW SESSION STATUS WHERE Variable_name IN ('Com_prepare_sql', 'Com_execute_sql')"
        ).fetchall()
    )
    db.rollback()
    return int(rows["Com_prepare_sql"]), int(rows["Com_execute_sql"])


def test_the_fence_statements_are_prepared_once_per_connection(mariadb_client_url: str) -> None:
    """The first write sends the text (the fence table not made yet: made first); the second
    prepares in the same round trip; later writes only EXECUTE; a statement the server forgot is
    prepared again."""
    db = connect_url(mariadb_client_url)
    try:
        assert not fences.fence_table_exists(db)
        with db.autocommit():
            db.execute("CREATE TABLE prepared_rows (v INTEGER)")
        before = _prepares_and_executes(db)
        for i in range(3):
            slot = Slot("prepared", "load", -1, uuid.uuid4().hex)
            token = fences.issue_token(db, slot, "prepared_rows", _attempt(1)).token
            assert token == 1
            db.begin()
            db.execute("INSERT INTO prepared_rows (v) VALUES (%(v)s)", {"v": i})
            assert fences.commit_write(db, slot, "prepared_rows", _attempt(1), token)
        prepares, executes = (after - b for after, b in zip(_prepares_and_executes(db), before, strict=True))
        assert (prepares, executes) == (2, 4)  # the token's upsert and the check, prepared once each
        assert len(db.sql_prepared) == 2
        for name in db.sql_prepared:
            with db.autocommit():
                db.execute(f"DEALLOCATE PREPARE {name}")
        slot = Slot("prepared", "load", -1, uuid.uuid4().hex)
        token = fences.issue_token(db, slot, "prepared_rows", _attempt(1)).token
        db.begin()
        db.execute("INSERT INTO prepared_rows (v) VALUES (9)")
        assert fences.commit_write(db, slot, "prepared_rows", _attempt(1), token)
        assert [r[0] for r in db.execute("SELECT v FROM prepared_rows ORDER BY v").fetchall()] == [0, 1, 2, 9]
        db.rollback()
    finally:
        db.close()
