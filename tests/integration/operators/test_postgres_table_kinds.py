"""PostgreSQL tables a fence cannot protect are refused by name before anything is written: a foreign
table (its writes go to another server, outside the fence's transaction), an unlogged table (a
crash empties it while the fence row says committed), and a partitioned table with such a partition.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from airflow_crashsafe.errors import UnfenceableTableError
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.operators import (
    FencedSQLOperator,
    NaturalKeyMergeOperator,
    PartitionOverwriteOperator,
)
from airflow_crashsafe.testing.context import fake_context
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

COLUMNS = "(day TEXT NOT NULL, region TEXT NOT NULL, amount INTEGER NOT NULL)"
SOURCE = "SELECT '2024-01-02' AS day, 'eu' AS region, 10 AS amount"


def _foreign(target: SqlTarget) -> None:
    """``revenue`` as a postgres_fdw table over ``revenue_remote`` in the same database."""
    parts = urlsplit(target.url)
    target.run(
        "CREATE EXTENSION IF NOT EXISTS postgres_fdw",
        f"CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '{parts.hostname}', "
        f"port '{parts.port}', dbname '{parts.path.lstrip('/')}')",
        f"CREATE USER MAPPING FOR CURRENT_USER SERVER loopback OPTIONS (user '{parts.username}')",
        f"CREATE TABLE revenue_remote {COLUMNS}",
        f"CREATE FOREIGN TABLE revenue {COLUMNS} SERVER loopback OPTIONS (table_name 'revenue_remote')",
    )


KINDS = {
    "foreign": (_foreign, r"revenue \(the target of '\w+'\) is a foreign table"),
    "unlogged": (
        lambda t: t.run(f"CREATE UNLOGGED TABLE revenue {COLUMNS}"),
        r"revenue \(the target of '\w+'\) is UNLOGGED.*ALTER TABLE revenue SET LOGGED",
    ),
    "unlogged-partition": (
        lambda t: t.run(
            f"CREATE TABLE revenue {COLUMNS} PARTITION BY LIST (day)",
            "CREATE UNLOGGED TABLE revenue_d2 PARTITION OF revenue FOR VALUES IN ('2024-01-02')",
        ),
        r"revenue \(the target of '\w+'\), whose partition revenue_d2 is UNLOGGED",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_operators_refuse_a_table_the_fence_cannot_protect(pg_target: SqlTarget, kind: str) -> None:
    """Overwrite, MERGE and statements on the table are refused, naming it and why; nothing is written."""
    make, refusal = KINDS[kind]
    make(pg_target)
    ops = [
        PartitionOverwriteOperator(
            task_id="load",
            conn_id=pg_target.conn_id,
            target_table="revenue",
            partition={"day": "2024-01-02"},
            sql=SOURCE,
        ),
        NaturalKeyMergeOperator(
            task_id="merge",
            conn_id=pg_target.conn_id,
            target_table="revenue",
            sql=SOURCE,
            natural_key=["day", "region"],
        ),
    ]
    for op in ops:
        with pytest.raises(UnfenceableTableError, match=refusal):
            op.execute(fake_context(task_id=op.task_id))
    stmts = FencedSQLOperator(
        task_id="stmts",
        conn_id=pg_target.conn_id,
        sql="INSERT INTO revenue VALUES ('2024-01-02', 'eu', 1)",
        target="x",
    )
    with pytest.raises(UnfenceableTableError, match=r"revenue \(changed by statement 1 of 'stmts'\)"):
        stmts.execute(fake_context(task_id="stmts"))
    with (
        pytest.raises(UnfenceableTableError, match=r"revenue \(named in tables=\)"),
        fenced_transaction(pg_target.conn_id, "x", context=fake_context(task_id="body"), tables=["revenue"]),
    ):
        pytest.fail("the body must not run")
    assert pg_target.rows("SELECT count(*) FROM revenue") == [(0,)]
    assert pg_target.fence_rows() == []


def test_a_logged_local_table_is_written(pg_target: SqlTarget) -> None:
    """The check lets an ordinary table (and a logged partitioned one) through, and names it in tables=."""
    pg_target.run(
        f"CREATE TABLE revenue {COLUMNS} PARTITION BY LIST (day)",
        "CREATE TABLE revenue_d2 PARTITION OF revenue FOR VALUES IN ('2024-01-02')",
    )
    with fenced_transaction(
        pg_target.conn_id, "x", context=fake_context(task_id="body"), tables=["revenue"]
    ) as tx:
        tx.cursor.execute("INSERT INTO revenue VALUES ('2024-01-02', 'eu', 1)")
    op = PartitionOverwriteOperator(
        task_id="load",
        conn_id=pg_target.conn_id,
        target_table="revenue",
        partition={"day": "2024-01-02"},
        sql=SOURCE,
    )
    assert op.execute(fake_context(task_id="load"))["rows"] == 1
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == [("2024-01-02", "eu", 10)]
