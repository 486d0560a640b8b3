"""Both MySQL clients MySqlHook opens (mysqlclient, mysql-connector-python) write alike on MariaDB.

The fencing rules and the operators' scenarios run through both in ``tests/integration/fencing``
and ``test_engine_matrix.py`` (the ``mariadb`` and ``mariadb-connector`` ids); here, what differs
between the two drivers themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.operators import FencedSQLOperator, PartitionOverwriteOperator
from airflow_crashsafe.store.dbapi import connect_target, connect_url
from airflow_crashsafe.testing.context import fake_context
from tests.support.adoption import in_thread
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

REVENUE = "CREATE TABLE revenue (day VARCHAR(10) NOT NULL, region VARCHAR(8) NOT NULL, amount INTEGER)"


@pytest.fixture
def target(mariadb_client_url: str, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh MariaDB database as ``crashsafe_target``, through each client (the URL's ``client``)."""
    conn_id = airflow_conn("crashsafe_target", mariadb_client_url)
    found = SqlTarget(conn_id=conn_id, url=mariadb_client_url, dialect="mariadb")
    found.run(REVENUE)
    return found


def test_the_connection_opens_the_client_it_names(target: SqlTarget) -> None:
    """``?client=`` (the connection's extra) picks the driver, and crashsafe's connection works through it."""
    db = connect_target(target.conn_id)
    try:
        driver = type(getattr(db.raw, "connection", db.raw)).__module__
        connector = "client=mysql-connector-python" in target.url
        assert driver.startswith("mysql.connector" if connector else "MySQLdb")
        assert "MariaDB" in db.describe()
        assert db.multi_statements
        assert db.compound_statements
    finally:
        db.close()


def test_a_percent_sign_in_the_source_is_written_as_it_is(target: SqlTarget) -> None:
    """A literal % in a source query reaches the table unchanged, with and without parameters: crashsafe
    runs the query with parameters of its own, and ``%%`` is a literal ``%`` through either client."""
    sql = "SELECT '2024-01-02' AS day, 'e%' AS region, 5 AS amount"
    PartitionOverwriteOperator(
        task_id="plain",
        conn_id=target.conn_id,
        target_table="revenue",
        partition={"day": "2024-01-02"},
        sql=sql,
    ).execute(fake_context(task_id="plain"))
    PartitionOverwriteOperator(
        task_id="params",
        conn_id=target.conn_id,
        target_table="revenue",
        partition={"day": "2024-01-03"},
        sql="SELECT '2024-01-03' AS day, %(r)s AS region, 7 AS amount",
        parameters={"r": "u%"},
    ).execute(fake_context(task_id="params"))
    FencedSQLOperator(
        task_id="stmts",
        conn_id=target.conn_id,
        sql="INSERT INTO revenue VALUES ('2024-01-04', CONCAT('t', %(crashsafe_try_number)s, '%%'), 1)",
        target="revenue",
    ).execute(fake_context(task_id="stmts"))
    assert target.rows("SELECT day, region FROM revenue") == [
        ("2024-01-02", "e%"),
        ("2024-01-03", "u%"),
        ("2024-01-04", "t1%"),
    ]


def test_a_fenced_body_reads_a_row_and_writes_on_through_either_client(target: SqlTarget) -> None:
    """A body may leave a result half read and run the next statement (mysql-connector's own cursors
    refuse that: "Unread result found")."""
    target.run("INSERT INTO revenue VALUES ('2024-01-01', 'eu', 1), ('2024-01-01', 'us', 2)")
    with fenced_transaction(target.conn_id, "revenue", context=fake_context(task_id="body")) as tx:
        tx.cursor.execute("SELECT region FROM revenue ORDER BY region")
        assert tx.cursor.fetchone() == ("eu",)
        other = tx.db.raw.cursor()
        other.execute("INSERT INTO revenue VALUES ('2024-01-05', 'x', %s)", (tx.token,))
    assert target.rows("SELECT day, region FROM revenue WHERE day = '2024-01-05'") == [("2024-01-05", "x")]


def test_a_client_crashsafe_does_not_drive_is_refused_by_name(
    mariadb_url: str, airflow_conn: Callable[[str, str], str]
) -> None:
    """A connection asking for another client (PyMySQL: MySqlHook cannot open it) is refused, naming both."""
    for open_it in (
        lambda: connect_target(airflow_conn("crashsafe_target", f"{mariadb_url}?client=pymysql")),
        lambda: connect_url(f"{mariadb_url}?client=pymysql"),
    ):
        with pytest.raises(ConfigurationError, match=r"'pymysql'.*'mysqlclient' or 'mysql-connector-python'"):
            open_it()


def test_on_kill_stops_the_running_statement_through_either_client(target: SqlTarget) -> None:
    """on_kill sends KILL QUERY for the connection's own server thread (each client names it its own
    way): the load stops within seconds and nothing commits."""
    slow = "SELECT '2024-01-02' AS day, 'x' AS region, sum(seq % 2) AS amount FROM seq_1_to_3000000000"
    op = PartitionOverwriteOperator(
        task_id="load",
        conn_id=target.conn_id,
        target_table="revenue",
        partition={"day": "2024-01-02"},
        sql=slow,
    )
    thread, outcome = in_thread(op, fake_context(task_id="load"))
    deadline = time.monotonic() + 15
    running = "SELECT count(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO%seq_1_to%'"
    while target.rows(running) == [(0,)]:
        assert time.monotonic() < deadline, f"the load never started: {outcome}"
        time.sleep(0.05)
    killed_at = time.monotonic()
    op.on_kill()
    thread.join(15)
    assert not thread.is_alive()
    assert time.monotonic() - killed_at < 10
    assert "interrupted" in str(outcome.get("error")), outcome
    assert target.rows("SELECT count(*) FROM revenue") == [(0,)]
    assert target.committed_try("revenue") is None
