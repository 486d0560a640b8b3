"""Cost of PartitionOverwriteOperator's fencing and partition check vs a plain DELETE + INSERT.

Usage: ``python benchmarks/partition_overwrite_check.py postgresql://postgres@127.0.0.1:5433/postgres
[--rows 100000] [--runs 7]``. Creates (and drops) a database of its own on that server. Variants,
run interleaved so drift hits all alike, each replacing one day of ``facts`` (5 days present):

* ``plain``: one transaction, DELETE the day, INSERT ... SELECT the source (no check, no fence).
* ``cte_check``: the same with the INSERT inside ``WITH ins AS (... RETURNING day) SELECT count(*),
  count(*) FILTER (WHERE (day = $1) IS NOT TRUE)`` (the alternative the operator does not use).
* ``guarded``: the same with each source row guarded by ``1 / (CASE WHEN (day = $1) IS TRUE THEN 1
  ELSE 0 END)`` behind ``OFFSET 0``, under a savepoint (what the operator runs on PostgreSQL).
* ``operator``: ``PartitionOverwriteOperator.execute`` end to end (connection, catalog checks,
  token, describe, DELETE, checked INSERT, fenced commit, event in an embedded store), vs
  ``plain_conn``: plain including opening and closing its own connection.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psycopg

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="crashsafe-bench-"))
os.environ["AIRFLOW__CRASHSAFE__EMBEDDED_PATH"] = os.path.join(os.environ["AIRFLOW_HOME"], "store.db")

from airflow_crashsafe.testing.postgres import drop_database, make_database

DAY = "2024-01-03"
SOURCE = (
    "SELECT %(day)s::date AS day, 'r' || (g %% 10) AS region, g AS id, g * 1.5 AS amount "
    "FROM generate_series(1, {rows}) g"
)
COLS = "day, region, id, amount"


def _plain(conn: psycopg.Connection[Any], rows: int) -> None:
    conn.execute("DELETE FROM facts WHERE day = %(day)s", {"day": DAY})
    conn.execute(
        f"INSERT INTO facts ({COLS}) SELECT {COLS} FROM ({SOURCE.format(rows=rows)}) s", {"day": DAY}
    )
    conn.commit()


def _cte(conn: psycopg.Connection[Any], rows: int) -> None:
    conn.execute("DELETE FROM facts WHERE day = %(day)s", {"day": DAY})
    row = conn.execute(
        f"WITH ins AS (INSERT INTO facts ({COLS}) SELECT {COLS} FROM ({SOURCE.format(rows=rows)}) s "
        "RETURNING day) SELECT count(*), count(*) FILTER (WHERE (day = %(p)s) IS NOT TRUE) FROM ins",
        {"day": DAY, "p": DAY},
    ).fetchone()
    assert row == (rows, 0)
    conn.commit()


def _guarded(conn: psycopg.Connection[Any], rows: int) -> None:
    conn.execute("DELETE FROM facts WHERE day = %(day)s", {"day": DAY})
    conn.execute("SAVEPOINT s")
    cur = conn.execute(
        f"INSERT INTO facts ({COLS}) SELECT {COLS} FROM (SELECT * FROM ({SOURCE.format(rows=rows)}) s "
        "OFFSET 0) g WHERE 1 / (CASE WHEN (day = %(p)s) IS TRUE THEN 1 ELSE 0 END) = 1",
        {"day": DAY, "p": DAY},
    )
    assert cur.rowcount == rows
    conn.execute("RELEASE SAVEPOINT s")
    conn.commit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("admin_url")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    url = make_database(args.admin_url, prefix="crashsafe_bench")
    os.environ["AIRFLOW_CONN_BENCH"] = url
    try:
        run(url, args.rows, args.runs)
    finally:
        drop_database(args.admin_url, url)


def run(url: str, rows: int, runs: int) -> None:
    from airflow_crashsafe.operators import PartitionOverwriteOperator
    from airflow_crashsafe.testing.context import fake_context

    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE facts (day DATE NOT NULL, region TEXT, id INTEGER, amount NUMERIC)")
        conn.execute("CREATE INDEX facts_day ON facts (day)")
        for d in range(1, 6):
            conn.execute(
                f"INSERT INTO facts ({COLS}) SELECT {COLS} FROM ({SOURCE.format(rows=rows)}) s",
                {"day": f"2024-01-0{d}"},
            )
        conn.commit()
    op = PartitionOverwriteOperator(
        task_id="bench",
        conn_id="bench",
        target_table="facts",
        partition={"day": DAY},
        sql=SOURCE.format(rows=rows),
        parameters={"day": DAY},
    )
    clear = iter(range(1, 10_000))

    def operator() -> None:
        result = op.execute(fake_context(task_id="bench", clear_number=next(clear)))
        assert (result["rows"], result["skipped"]) == (rows, False)

    def plain_conn() -> None:
        with psycopg.connect(url) as c:
            _plain(c, rows)

    with psycopg.connect(url) as conn:
        variants: dict[str, Callable[[], None]] = {
            "plain": lambda: _plain(conn, rows),
            "cte_check": lambda: _cte(conn, rows),
            "guarded": lambda: _guarded(conn, rows),
            "plain_conn": plain_conn,
            "operator": operator,
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for fn in variants.values():  # warm-up
            fn()
        for _ in range(runs):
            for name, fn in variants.items():
                with psycopg.connect(url, autocommit=True) as admin:  # same starting state, untimed
                    admin.execute("VACUUM facts")
                    admin.execute("CHECKPOINT")
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
    base = statistics.median(times["plain"])
    base_conn = statistics.median(times["plain_conn"])
    print(f"{rows} rows, {runs} runs each; median seconds (min..max), overhead vs plain")
    for name, values in times.items():
        ref = base_conn if name in ("operator", "plain_conn") else base
        med = statistics.median(values)
        print(
            f"  {name:11s} {med:.4f} ({min(values):.4f}..{max(values):.4f})  {100 * (med / ref - 1):+.1f} %"
        )


if __name__ == "__main__":
    main()
