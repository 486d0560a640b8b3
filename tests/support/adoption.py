"""A PostgreSQL target whose loads count their executions server-side, and re-runs raced against them.

Each load's source calls ``counted_work(seconds)``, which bumps a sequence (sequences are not
transactional, so a rolled-back execution still counts) and sleeps.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from airflow_crashsafe.operators import PartitionOverwriteOperator
from tests.support.sql_target import SqlTarget

__all__ = ["DAY", "executions", "in_thread", "overwrite_op", "setup", "source", "wait_running"]

DAY = "2024-01-02"


def source(seconds: float) -> str:
    """A source of two rows for DAY that counts one execution and works ``seconds``."""
    return (
        f"SELECT '{DAY}' AS day, r AS region, 10 AS amount "
        f"FROM counted_work({seconds}) AS w, unnest(ARRAY['eu', 'us']) AS r"
    )


def setup(target: SqlTarget) -> None:
    """The target table, the execution counter and ``counted_work``."""
    target.run(
        "CREATE TABLE revenue (day TEXT NOT NULL, region TEXT NOT NULL, amount INTEGER NOT NULL)",
        "CREATE SEQUENCE executions",
        """CREATE FUNCTION counted_work(seconds double precision) RETURNS integer LANGUAGE plpgsql AS $$
           BEGIN PERFORM nextval('executions'); PERFORM pg_sleep(seconds); RETURN 1; END $$""",
    )


def executions(target: SqlTarget) -> int:
    """How many times a source ran (committed or not)."""
    rows = target.rows("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM executions")
    return int(rows[0][0])


def overwrite_op(target: SqlTarget, seconds: float, **kwargs: Any) -> PartitionOverwriteOperator:
    """The load: overwrite DAY of ``revenue`` with :func:`source`."""
    return PartitionOverwriteOperator(
        task_id="load_revenue",
        conn_id=target.conn_id,
        target_table="revenue",
        partition={"day": DAY},
        sql=source(seconds),
        **kwargs,
    )


def in_thread(
    op: PartitionOverwriteOperator, context: dict[str, Any]
) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``op.execute(context)`` in a thread; its result or error lands in the dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = op.execute(context)
        except BaseException as exc:  # the test inspects it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def wait_running(url: str, timeout: float = 15.0) -> int:
    """The pid of the backend running a unit (a DO block calling counted_work)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE 'DO %%counted_work%%' AND pid <> pg_backend_pid()"
            ).fetchone()
            if row:
                return int(row[0])
            time.sleep(0.02)
    raise AssertionError("no unit started")
