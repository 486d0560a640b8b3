"""The storage-engine rule on MySQL/MariaDB (only InnoDB) and the two MySQL clients, without a server.

The engines a real MariaDB ships are refused on a real server in
``tests/integration/operators/test_storage_engines.py``; the ones it does not ship here (MyRocks,
Spider, CONNECT) follow the same rule, pinned by their wording below.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_crashsafe.errors import ConfigurationError, UnfenceableTableError
from airflow_crashsafe.store.mysql_clients import CLIENTS, check_client, mysql_connection
from airflow_crashsafe.store.mysql_engines import engine_refusal, is_fenceable_engine


class _Engines:
    """Answers ``information_schema.ENGINES``' TRANSACTIONS for one engine, as a Db would."""

    def __init__(self, transactions: str | None) -> None:
        self.transactions = transactions
        self.asked: list[dict[str, Any]] = []

    def execute(self, sql: str, params: dict[str, Any]) -> _Engines:
        assert "information_schema.ENGINES" in sql
        self.asked.append(params)
        return self

    def fetchone(self) -> tuple[str] | None:
        return None if self.transactions is None else (self.transactions,)


@pytest.mark.parametrize("engine", ["InnoDB", "innodb", "INNODB"])
def test_innodb_is_the_one_engine_a_fence_accepts(engine: str) -> None:
    """InnoDB, however the server spells it, and nothing else."""
    assert is_fenceable_engine(engine)


@pytest.mark.parametrize(
    "engine", ["MyISAM", "Aria", "MEMORY", "CSV", "ROCKSDB", "SPIDER", "SEQUENCE", "", None]
)
def test_every_other_engine_is_refused(engine: str | None) -> None:
    """Whether or not the engine has transactions of its own: only InnoDB is proven with the fence."""
    assert not is_fenceable_engine(engine)


@pytest.mark.parametrize(
    ("engine", "transactions", "why"),
    [
        ("MyISAM", "NO", "uses the MyISAM storage engine, which cannot roll back:"),
        (
            "Aria",
            "NO",
            "which cannot roll back (TRANSACTIONAL=1 makes an Aria table crash-safe, not able to roll back)",
        ),
        (
            "ROCKSDB",
            "YES",
            "uses the ROCKSDB storage engine, on which crashsafe's fence is not proven (only on InnoDB)",
        ),
        ("SPIDER", "YES", "uses the SPIDER storage engine, which writes to another server"),
        (
            "FEDERATED",
            "YES",
            "which writes to another server, in a transaction that does not commit or roll back",
        ),
        ("CONNECT", "NO", "uses the CONNECT storage engine, which writes to another server"),
        ("TOKUDB", None, "uses the TOKUDB storage engine, which cannot roll back"),  # plugin not loaded
    ],
)
def test_a_refusal_names_the_table_the_engine_why_and_the_fix(
    engine: str, transactions: str | None, why: str
) -> None:
    """The message an on-call engineer reads: which table, which engine, why, and the ALTER that fixes it."""
    error = engine_refusal(_Engines(transactions), "shop", "revenue", "the target of 'load'", engine)
    assert isinstance(error, UnfenceableTableError)
    text = str(error)
    assert text.startswith("Table shop.revenue (the target of 'load') ")
    assert why in text
    assert "ALTER TABLE `shop`.`revenue` ENGINE=InnoDB" in text
    assert text.endswith("Nothing was written.")


def test_the_fence_table_refusal_says_what_the_fence_needs() -> None:
    """For crashsafe's own table the reason is the fence's lock and commit, not the user's rows."""
    text = str(
        engine_refusal(_Engines("NO"), "shop", "crashsafe_fences", "the fence table", "MyISAM", fence=True)
    )
    assert "the fence's row lock and the commit it records must live in the write's transaction" in text
    assert "ALTER TABLE `shop`.`crashsafe_fences` ENGINE=InnoDB" in text


def test_a_table_without_an_engine_is_refused_without_asking() -> None:
    """No engine (a broken table): refused, and no ENGINES lookup for a name that is not there."""
    engines = _Engines("YES")
    assert "has no storage engine this server can open" in str(engine_refusal(engines, "s", "t", "r", None))
    assert engines.asked == []


@pytest.mark.parametrize("client", [None, "", "mysqlclient", "mysql-connector-python"])
def test_the_clients_mysqlhook_opens_are_accepted(client: str | None) -> None:
    """No extra ``client`` means mysqlclient, as in MySqlHook."""
    assert check_client(client, "Connection 'x'") in CLIENTS


def test_another_client_is_refused_naming_the_two() -> None:
    """PyMySQL (MySqlHook builds a URI for it but cannot open it) or a typo: refused, both named."""
    with pytest.raises(
        ConfigurationError,
        match=r"asks for the MySQL client 'pymysql'.*'mysqlclient' or 'mysql-connector-python'",
    ):
        check_client("pymysql", "Connection 'x'")


def test_a_connection_of_neither_client_is_refused() -> None:
    """Anything that is neither driver's connection is not driven as if it were."""
    with pytest.raises(ConfigurationError, match="neither mysqlclient's nor mysql-connector-python's"):
        mysql_connection(object())
