"""MariaDB tables that cannot roll back with the fence are refused by every fenced operator, by name,
before anything is written, through both MySQL clients (docs/databases.md, "Tables a fence can
protect").

On a MyISAM table a zombie's write after the newer attempt committed stood (the table ended with
its rows while it got FencedOut), and a PartitionMismatchError left the partition deleted and the
stray row in: every engine but InnoDB is refused now, the partition and the fence row untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import pytest

from airflow_crashsafe.errors import (
    ConfigurationError,
    IncompleteRollbackError,
    PartitionMismatchError,
    UnfenceableTableError,
)
from airflow_crashsafe.operators import (
    FencedSQLOperator,
    NaturalKeyMergeOperator,
)
from airflow_crashsafe.testing.context import fake_context
from tests.support.sql_target import SqlTarget, overwrite_revenue

pytestmark = pytest.mark.integration

COLUMNS = "(day VARCHAR(10) NOT NULL, region VARCHAR(8) NOT NULL, amount INTEGER NOT NULL)"
SEED = "INSERT INTO revenue VALUES ('2024-01-01', 'eu', 1), ('2024-01-02', 'eu', 999)"
DAY_ROWS = "SELECT '2024-01-02' AS day, 'eu' AS region, 10 AS amount"
STRAY = DAY_ROWS + " UNION ALL SELECT '2024-01-05', 'eu', 5"  # one row outside the partition
# Loadable engines Debian's MariaDB server ships as plugins: installed on the test server if absent.
PLUGINS = {"ARCHIVE": "ha_archive", "BLACKHOLE": "ha_blackhole", "FEDERATED": "ha_federatedx"}
# engine (as information_schema.TABLES names it) -> the table options that make one.
ENGINES = {
    "MyISAM": "ENGINE=MyISAM",
    "Aria": "ENGINE=Aria TRANSACTIONAL=0",
    "Aria-transactional": "ENGINE=Aria TRANSACTIONAL=1",  # crash-safe, still no rollback
    "MEMORY": "ENGINE=MEMORY",
    "CSV": "ENGINE=CSV",  # no indexes, every column NOT NULL
    "ARCHIVE": "ENGINE=ARCHIVE",
    "BLACKHOLE": "ENGINE=BLACKHOLE",
    "MRG_MyISAM": "ENGINE=MRG_MyISAM UNION=(revenue_part) INSERT_METHOD=LAST",
    "FEDERATED": "ENGINE=FEDERATED CONNECTION='{remote}'",
}
WHY = {"FEDERATED": "writes to another server"}


@pytest.fixture
def target(mariadb_client_url: str, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh MariaDB database as ``crashsafe_target``, through each MySQL client."""
    return SqlTarget(
        conn_id=airflow_conn("crashsafe_target", mariadb_client_url),
        url=mariadb_client_url,
        dialect="mariadb",
    )


def _make(target: SqlTarget, engine: str) -> None:
    """``revenue`` on ``engine``, seeded where the engine keeps rows."""
    name = engine.split("-")[0]
    if name in PLUGINS and not target.rows(
        f"SELECT 1 FROM information_schema.ENGINES WHERE ENGINE = '{name}'"
    ):
        target.run(f"INSTALL SONAME '{PLUGINS[name]}'")
    parts = urlsplit(target.url.split("?")[0])
    remote = f"mysql://{parts.username or 'root'}@{parts.hostname}:{parts.port}{parts.path}/revenue_remote"
    if name == "MRG_MyISAM":
        target.run(f"CREATE TABLE revenue_part {COLUMNS} ENGINE=MyISAM")
    if name == "FEDERATED":
        target.run(f"CREATE TABLE revenue_remote {COLUMNS} ENGINE=InnoDB")
    target.run(f"CREATE TABLE revenue {COLUMNS} {ENGINES[engine].format(remote=remote)}")
    if name != "BLACKHOLE":
        target.run(SEED)


def _refused(target: SqlTarget, engine: str) -> str:
    """The words a refusal of ``revenue`` on ``engine`` must hold: table, engine, why, the fix."""
    database = urlsplit(target.url.split("?")[0]).path.lstrip("/")
    name = engine.split("-")[0]
    why = WHY.get(name, "cannot roll back")
    return (
        rf"Table {database}\.revenue \(the target of '\w+'\) uses the {name} storage engine, which {why}"
        rf".*ALTER TABLE `{database}`\.`revenue` ENGINE=InnoDB.*Nothing was written"
    )


@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_fenced_operator_refuses_a_table_that_cannot_roll_back(target: SqlTarget, engine: str) -> None:
    """Overwrite, MERGE and statements on a non-InnoDB table are refused by name before any token."""
    _make(target, engine)
    before = target.rows("SELECT day, region, amount FROM revenue")
    overwrite = overwrite_revenue(target, DAY_ROWS)
    merge = NaturalKeyMergeOperator(
        task_id="merge",
        conn_id=target.conn_id,
        target_table="revenue",
        sql=DAY_ROWS,
        natural_key=["day", "region"],
    )
    stmts = FencedSQLOperator(
        task_id="stmts",
        conn_id=target.conn_id,
        sql="DELETE FROM revenue WHERE day = '2024-01-02'",
        target="daily",
    )
    for op in (overwrite, merge):
        with pytest.raises(UnfenceableTableError, match=_refused(target, engine)):
            op.execute(fake_context(task_id=op.task_id))
    with pytest.raises(UnfenceableTableError, match=r"revenue \(changed by statement 1 of 'stmts'\)"):
        stmts.execute(fake_context(task_id="stmts"))
    assert target.rows("SELECT day, region, amount FROM revenue") == before
    assert target.fence_rows() == []  # no attempt took a token: a running one is never fenced out


def test_the_issue_scenario_a_stray_row_on_myisam_leaves_the_partition_as_it_was(target: SqlTarget) -> None:
    """The overwrite whose source strays outside its partition no longer deletes a MyISAM partition:
    it is refused before the DELETE; the same table on InnoDB rolls the stray write back whole."""
    _make(target, "MyISAM")
    op = overwrite_revenue(target, STRAY)
    with pytest.raises(UnfenceableTableError, match="MyISAM"):
        op.execute(fake_context(task_id="load"))
    assert target.rows("SELECT day, amount FROM revenue") == [("2024-01-01", 1), ("2024-01-02", 999)]
    target.run("ALTER TABLE revenue ENGINE=InnoDB")  # what the refusal says to do
    with pytest.raises(PartitionMismatchError, match="1 of 2 row"):
        op.execute(fake_context(task_id="load"))
    assert target.rows("SELECT day, amount FROM revenue") == [("2024-01-01", 1), ("2024-01-02", 999)]
    done = overwrite_revenue(target, DAY_ROWS).execute(fake_context(task_id="load"))
    assert (done["rows"], done["deleted"]) == (1, 1)


def test_a_view_is_checked_through_the_tables_under_it(target: SqlTarget) -> None:
    """A view over a MyISAM table is refused, naming the view and the table; over InnoDB it is written."""
    _make(target, "MyISAM")
    target.run(
        "CREATE TABLE facts " + COLUMNS + " ENGINE=InnoDB", "CREATE VIEW recent AS SELECT * FROM revenue"
    )
    target.run("CREATE VIEW recent_facts AS SELECT * FROM facts")
    stmts = FencedSQLOperator(
        task_id="stmts",
        conn_id=target.conn_id,
        sql="INSERT INTO recent VALUES ('2024-01-03', 'eu', 3)",
        target="x",
    )
    with pytest.raises(
        UnfenceableTableError, match=r"revenue \(under view \w+\.recent, changed by statement 1"
    ):
        stmts.execute(fake_context(task_id="stmts"))
    fine = FencedSQLOperator(
        task_id="fine",
        conn_id=target.conn_id,
        sql="INSERT INTO recent_facts VALUES ('2024-01-03', 'eu', 3)",
        target="x",
    )
    assert fine.execute(fake_context(task_id="fine"))["rows"] == 1


def test_statements_whose_tables_cannot_be_read_need_tables(target: SqlTarget) -> None:
    """A CALL changes tables its text does not name: refused unless ``tables`` names them (each checked)."""
    _make(target, "Aria")
    target.run(
        "CREATE TABLE facts " + COLUMNS + " ENGINE=InnoDB",
        "CREATE PROCEDURE load_day(d VARCHAR(10)) INSERT INTO facts VALUES (d, 'eu', 1)",
    )
    call = "CALL load_day('2024-01-02')"
    with pytest.raises(ConfigurationError, match=r"Statement 1 of 'load' \(CALL load_day.*tables=\[\.\.\.\]"):
        FencedSQLOperator(task_id="load", conn_id=target.conn_id, sql=call, target="facts").execute(
            fake_context(task_id="load")
        )
    with pytest.raises(UnfenceableTableError, match=r"revenue \(named in tables= of 'load'\) uses the Aria"):
        FencedSQLOperator(
            task_id="load", conn_id=target.conn_id, sql=call, target="facts", tables=["facts", "revenue"]
        ).execute(fake_context(task_id="load"))
    done = FencedSQLOperator(
        task_id="load", conn_id=target.conn_id, sql=call, target="facts", tables=["facts"]
    ).execute(fake_context(task_id="load"))
    assert done["skipped"] is False
    assert target.rows("SELECT day FROM facts") == [("2024-01-02",)]


def test_a_trigger_writing_a_myisam_table_is_reported_when_the_write_rolls_back(target: SqlTarget) -> None:
    """An InnoDB target whose trigger logs into a MyISAM table: a PartitionMismatchError rolls the
    target back but not the log, and the operator says so (IncompleteRollbackError, from the mismatch)."""
    target.run(
        f"CREATE TABLE revenue {COLUMNS} ENGINE=InnoDB",
        SEED,
        "CREATE TABLE audit (day VARCHAR(10)) ENGINE=MyISAM",
        "CREATE TRIGGER log_revenue AFTER INSERT ON revenue FOR EACH ROW INSERT INTO audit VALUES (NEW.day)",
    )
    op = overwrite_revenue(target, STRAY)
    with pytest.raises(
        IncompleteRollbackError, match=r"the write failed \(PartitionMismatchError\)"
    ) as caught:
        op.execute(fake_context(task_id="load"))
    assert isinstance(caught.value.__cause__, PartitionMismatchError)
    assert target.rows("SELECT day, amount FROM revenue") == [("2024-01-01", 1), ("2024-01-02", 999)]
    assert target.rows("SELECT day FROM audit") == [("2024-01-02",), ("2024-01-05",)]
