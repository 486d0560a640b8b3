"""``fenced_transaction`` on MariaDB, through both MySQL clients: tables that cannot roll back with the
fence are refused before the token, the fence table is always InnoDB, and a rollback the server
could not complete is reported, never passed off as "nothing was written"."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.errors import (
    ConfigurationError,
    DuplicateSourceKeysError,
    FencedOut,
    IncompleteRollbackError,
    UnfenceableTableError,
)
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.sql.plans.merge import MergePlan
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.store import Store
from tests.support.fencing import make_context

pytestmark = pytest.mark.integration


@pytest.fixture
def db(mariadb_client_url: str) -> Iterator[Db]:
    """A connection to a fresh MariaDB database, through each MySQL client (closed afterwards)."""
    opened = connect_url(mariadb_client_url)
    yield opened
    opened.close()


def _run(db: Db, *statements: str) -> None:
    with db.autocommit():
        for statement in statements:
            db.execute(statement)


def _rows(db: Db, sql: str) -> list[tuple[object, ...]]:
    rows = sorted(tuple(r) for r in db.execute(sql).fetchall())
    db.rollback()
    return rows


def _ctx(try_number: int = 1, task_id: str = "load") -> dict[str, object]:
    return make_context(dag_id="engines", task_id=task_id, try_number=try_number, ti_id=uuid.uuid4().hex)


def _engine(db: Db, table: str) -> str:
    return str(_rows(db, f"SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_NAME = '{table}'")[0][0])


def test_the_zombie_and_its_retry_are_both_refused_on_a_myisam_target(db: Db, store: Store) -> None:
    """The issue's night on MyISAM: neither try may start, so neither writes or takes a token."""
    _run(db, "CREATE TABLE out_rows (v INTEGER) ENGINE=MyISAM", "INSERT INTO out_rows VALUES (0)")
    ran = []
    for try_number in (1, 2):
        with (
            pytest.raises(UnfenceableTableError, match=r"out_rows \(the fence's target\) uses the MyISAM"),
            fenced_transaction("unused", "out_rows", context=_ctx(try_number), db=db, store=store) as tx,
        ):
            ran.append(tx)
    assert ran == []
    assert _rows(db, "SELECT v FROM out_rows") == [(0,)]
    assert not fences.fence_table_exists(db)


def test_named_tables_are_checked_and_must_exist(db: Db, store: Store) -> None:
    """A logical target with ``tables=``: a MEMORY table among them is refused, a missing one named."""
    _run(db, "CREATE TABLE facts (v INTEGER) ENGINE=InnoDB", "CREATE TABLE scratch (v INTEGER) ENGINE=MEMORY")
    with (
        pytest.raises(UnfenceableTableError, match=r"scratch \(named in tables=\) uses the MEMORY"),
        fenced_transaction(
            "unused", "nightly", context=_ctx(), db=db, store=store, tables=["facts", "scratch"]
        ),
    ):
        pytest.fail("the body must not run")
    with (
        pytest.raises(ConfigurationError, match=r"Table factz \(named in tables=\) does not exist"),
        fenced_transaction("unused", "nightly", context=_ctx(), db=db, store=store, tables=["factz"]),
    ):
        pytest.fail("the body must not run")
    with fenced_transaction("unused", "nightly", context=_ctx(), db=db, store=store, tables=["facts"]) as tx:
        tx.cursor.execute("INSERT INTO facts VALUES (1)")
    assert _rows(db, "SELECT v FROM facts") == [(1,)]


def test_a_target_that_names_no_table_says_nothing_was_checked(
    db: Db, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a table to check, the write runs and a warning says so (and asks for ``tables=``)."""
    config.store_conn_id()  # Airflow's first import reconfigures logging: attach after it
    logger = logging.getLogger("airflow_crashsafe")
    logger.addHandler(caplog.handler)
    try:
        _run(db, "CREATE TABLE facts (v INTEGER)")
        with (
            caplog.at_level(logging.WARNING, logger="airflow_crashsafe"),
            fenced_transaction("unused", "nightly", context=_ctx(), db=db, store=store) as tx,
        ):
            tx.cursor.execute("INSERT INTO facts VALUES (1)")
    finally:
        logger.removeHandler(caplog.handler)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "target 'nightly' names no table" in said
    assert "Pass tables=[...]" in said


def test_the_fence_table_is_innodb_whatever_the_default_engine(db: Db, store: Store) -> None:
    """A session whose default engine is MyISAM still gets an InnoDB fence table."""
    _run(db, "CREATE TABLE facts (v INTEGER) ENGINE=InnoDB", "SET SESSION default_storage_engine = MyISAM")
    with fenced_transaction("unused", "facts", context=_ctx(), db=db, store=store) as tx:
        tx.cursor.execute("INSERT INTO facts VALUES (1)")
    assert _engine(db, fences.FENCE_TABLE) == "InnoDB"


def test_a_fence_table_on_another_engine_is_refused(db: Db, mariadb_client_url: str, store: Store) -> None:
    """A fence table on another engine (made by an older install on a latin1, MyISAM-default server,
    or altered) refuses every write from a connection's first, saying how to fix it."""
    _run(db, "CREATE TABLE facts (v INTEGER) ENGINE=InnoDB")
    with fenced_transaction("unused", "facts", context=_ctx(), db=db, store=store) as tx:
        tx.cursor.execute("INSERT INTO facts VALUES (1)")
    # MyISAM keys hold 1000 bytes: a fence table there is latin1 (utf8mb4 needs InnoDB's 3072).
    _run(db, f"ALTER TABLE {fences.FENCE_TABLE} CONVERT TO CHARACTER SET latin1, ENGINE=MyISAM")
    refusal = (
        r"crashsafe_fences \(crashsafe's fence table.*MyISAM storage engine, which cannot roll back: the "
        r"fence's row lock.*ALTER TABLE `\w+`\.`crashsafe_fences` ENGINE=InnoDB"
    )
    later = connect_url(mariadb_client_url)  # the next task's connection
    try:
        with (
            pytest.raises(UnfenceableTableError, match=refusal),
            fenced_transaction("unused", "facts", context=_ctx(task_id="next"), db=later, store=store),
        ):
            pytest.fail("the body must not run")
        with pytest.raises(UnfenceableTableError, match=refusal):
            fences.ensure_fence_table(later)  # what a first write runs after CREATE TABLE IF NOT EXISTS
    finally:
        later.close()
    assert _rows(db, "SELECT v FROM facts") == [(1,)]


def test_a_zombie_that_wrote_an_unnamed_myisam_table_is_reported(
    db: Db, mariadb_client_url: str, store: Store
) -> None:
    """A body writing a MyISAM table nobody named: when the zombie is fenced out, its row there
    stands, and it raises IncompleteRollbackError (from FencedOut), not a FencedOut that says
    nothing was written."""
    _run(db, "CREATE TABLE facts (v INTEGER) ENGINE=InnoDB", "CREATE TABLE side (v INTEGER) ENGINE=MyISAM")
    other = connect_url(mariadb_client_url)
    try:
        zombie = fenced_transaction("unused", "facts", context=_ctx(1), db=db, store=store)
        tx = zombie.__enter__()
        with fenced_transaction("unused", "facts", context=_ctx(2), db=other, store=store) as newer:
            newer.cursor.execute("INSERT INTO facts VALUES (2)")
        tx.cursor.execute("INSERT INTO facts VALUES (1)")
        tx.cursor.execute("INSERT INTO side VALUES (1)")
        with pytest.raises(
            IncompleteRollbackError, match=r"a newer attempt holds the slot.*warning 1196"
        ) as caught:
            zombie.__exit__(None, None, None)
        assert isinstance(caught.value.__cause__, FencedOut)
    finally:
        other.close()
    assert _rows(db, "SELECT v FROM facts") == [(2,)]
    assert _rows(db, "SELECT v FROM side") == [(1,)]  # what the error warns of
    assert [e["ti_id"] for e in store.events(dag_id="engines", kinds=["fenced_out"])] != []


def test_a_failed_body_that_wrote_an_unnamed_memory_table_is_reported(db: Db, store: Store) -> None:
    """The body's own error, after a write to a MEMORY table, surfaces as IncompleteRollbackError
    (the error as its cause); an InnoDB-only body that fails raises its own error unchanged."""
    _run(db, "CREATE TABLE facts (v INTEGER) ENGINE=InnoDB", "CREATE TABLE side (v INTEGER) ENGINE=MEMORY")

    def body(table: str, try_number: int) -> None:
        with fenced_transaction("unused", "facts", context=_ctx(try_number), db=db, store=store) as tx:
            tx.cursor.execute(f"INSERT INTO {table} VALUES (1)")
            raise ValueError(f"the body broke after writing {table}")

    with pytest.raises(IncompleteRollbackError, match=r"the write failed \(ValueError\)") as caught:
        body("side", 1)
    assert isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(ValueError, match="after writing facts"):
        body("facts", 2)
    assert _rows(db, "SELECT v FROM facts") == []
    assert _rows(db, "SELECT v FROM side") == [(1,)]


def test_the_merge_source_table_is_innodb_whatever_the_default_engine(db: Db, store: Store) -> None:
    """On a MyISAM-default session the MERGE's temporary source table is InnoDB: a refused source
    rolls back whole and raises its own error, not a false IncompleteRollbackError."""
    _run(
        db,
        "CREATE TABLE totals (k VARCHAR(8) NOT NULL PRIMARY KEY, amount INTEGER) ENGINE=InnoDB",
        "SET SESSION default_storage_engine = MyISAM",
        "SET SESSION default_tmp_storage_engine = MyISAM",
    )
    plan = MergePlan.build(
        operator="NaturalKeyMergeOperator",
        task_id="merge",
        conn_id="unused",
        target_table="totals",
        sql="SELECT 'a' AS k, 1 AS amount UNION ALL SELECT 'a', 2",
        natural_key=["k"],
        update_columns=None,
        parameters=None,
        allow_nondeterministic=False,
    )
    prepared = plan.prepare(db)
    db.rollback()
    with (
        pytest.raises(DuplicateSourceKeysError),
        fenced_transaction("unused", "totals", context=_ctx(task_id="merge"), db=db, store=store) as tx,
    ):
        plan.transaction(tx, prepared)
    assert _rows(db, "SELECT k FROM totals") == []
