"""The MySQL/MariaDB storage engine a fenced table needs: InnoDB, and the refusal of any other.

A fence rolls back a stale attempt's write, and locks the fence row from its check to its commit,
so every table of a fenced write must take part in the transaction: on MySQL/MariaDB that is a
property of the table's storage engine. MyISAM, Aria (``TRANSACTIONAL=1`` makes it crash-safe,
not able to roll back), MEMORY, CSV, ARCHIVE, BLACKHOLE, MRG_MyISAM, FEDERATED, CONNECT and
SEQUENCE cannot roll back a change; the engines that can besides InnoDB (MyRocks, Spider, ...) are
not proven with crashsafe's fence. So only InnoDB is accepted, the rule docs/databases.md gives
databases (an engine is supported once the acceptance scenarios pass on it).
"""

from __future__ import annotations

from typing import Any

from airflow_crashsafe.errors import UnfenceableTableError
from airflow_crashsafe.store.dialects import dialect_named

__all__ = ["FENCEABLE_ENGINE", "engine_refusal", "is_fenceable_engine"]

FENCEABLE_ENGINE = "InnoDB"
# Engines whose rows live on another server (information_schema.ENGINES says FEDERATED and
# SPIDER support transactions: their own, on the other server).
_REMOTE = ("federated", "spider", "connect")
_CONSEQUENCE = (
    "a stale attempt's write to it would stand after the fence refused it, and a write that failed "
    "half way would stay half done"
)
_FENCE_CONSEQUENCE = "the fence's row lock and the commit it records must live in the write's transaction"


def is_fenceable_engine(engine: object) -> bool:
    """Whether a table on ``engine`` (``information_schema.TABLES.ENGINE``) can be fenced."""
    return str(engine or "").lower() == FENCEABLE_ENGINE.lower()


def engine_refusal(
    db: Any, schema: str, table: str, role: str, engine: object, *, fence: bool = False
) -> UnfenceableTableError:
    """The error refusing table ``schema.table`` (``role``: what it is to the write; ``fence``:
    crashsafe's fence table) on ``engine``.

    Asks ``information_schema.ENGINES`` whether the engine can roll back at all, for the wording.
    """
    row = None
    if engine:
        row = db.execute(
            "SELECT TRANSACTIONS FROM information_schema.ENGINES WHERE ENGINE = %(e)s", {"e": str(engine)}
        ).fetchone()
    if not engine:
        why = "has no storage engine this server can open"
    elif str(engine).lower() in _REMOTE:
        why = (
            f"uses the {engine} storage engine, which writes to another server, in a transaction that "
            "does not commit or roll back as one with this one"
        )
    elif row is not None and str(row[0]).upper() == "YES":
        why = f"uses the {engine} storage engine, on which crashsafe's fence is not proven (only on InnoDB)"
    else:
        why = f"uses the {engine} storage engine, which cannot roll back"
        if str(engine).lower() == "aria":
            why += " (TRANSACTIONAL=1 makes an Aria table crash-safe, not able to roll back)"
    quote = dialect_named("mysql").ident
    quoted = f"{quote(schema)}.{quote(table)}"
    consequence = _FENCE_CONSEQUENCE if fence else _CONSEQUENCE
    return UnfenceableTableError(
        f"Table {schema}.{table} ({role}) {why}: {consequence}. crashsafe fences MySQL/MariaDB writes "
        f"to InnoDB tables only: convert it (ALTER TABLE {quoted} ENGINE=InnoDB) or write to an "
        "InnoDB table. Nothing was written."
    )
