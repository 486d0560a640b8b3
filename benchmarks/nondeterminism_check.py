"""What the non-determinism check adds to a NaturalKeyMergeOperator's write plan (once per execution).

Usage: ``python -m benchmarks.nondeterminism_check [--runs 7] [--n 200]``. Builds the write plan
(``write_plan()``, what ``execute`` does first, before connecting) ``n`` times per run with the
check (``checked``) and with ``allow_nondeterministic=True``, which skips it (``unchecked``, the
baseline: the other argument checks), interleaved so drift hits both alike, for two ~1 KB
sources: ``plain`` (comments, no quotes: read once, as PostgreSQL) and ``quoted`` (double-quoted
names: read as each of PostgreSQL, SQLite and MySQL, since the target is not known yet). Prints
the median per plan and what the check adds. Target: ≤ 20 ms per execution, under what the write
then spends opening its connection and running its catalog checks, token and statements (the
check runs once per execution, before connecting; DAG parsing does not run it). sqlglot's
tokenizer is pure Python here: ~3 ms per KB and dialect, against ~1 ms for the old hand lexer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="crashsafe-bench-"))

TARGET_MS = 20.0
_BODY = """
WITH src AS (
  SELECT o.order_id, o.customer_id, sum(l.amount) AS amount, %(day)s::date AS day
  FROM sales.orders o JOIN sales.lines l USING (order_id)
  WHERE o.created_at >= %(start)s AND o.created_at < %(end)s -- the run's window
  GROUP BY 1, 2
)
SELECT s.order_id, s.customer_id, s.amount, s.day, c.region,
       /* enrich */ coalesce(c.segment, 'none') AS segment
FROM src s LEFT JOIN crm.customers c ON c.id = s.customer_id
"""
SOURCES = {
    "plain": _BODY * 2,
    "quoted": _BODY.replace("c.region", 'c."Region"') * 2,
}


def _build(sql: str, n: int, *, check: bool) -> float:
    from airflow_crashsafe.operators import NaturalKeyMergeOperator

    op = NaturalKeyMergeOperator(
        task_id="merge",
        conn_id="warehouse",
        target_table="mart.orders",
        natural_key=["order_id"],
        sql=sql,
        allow_nondeterministic=not check,
    )
    start = time.perf_counter()
    for _ in range(n):
        op.write_plan()
    return (time.perf_counter() - start) / n * 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args(argv)
    _build(SOURCES["plain"], 20, check=True)  # imports and caches warm
    worst = 0.0
    for name, sql in SOURCES.items():
        checked, unchecked = [], []
        for _ in range(args.runs):
            unchecked.append(_build(sql, args.n, check=False))
            checked.append(_build(sql, args.n, check=True))
        base, with_check = statistics.median(unchecked), statistics.median(checked)
        added = with_check - base
        worst = max(worst, added)
        print(
            f"{name:7s} ({len(sql)} chars): unchecked {base:.3f} ms, checked {with_check:.3f} ms "
            f"per plan; the check adds {added:.3f} ms ({with_check / base:.1f}x)"
        )
    verdict = "OK" if worst <= TARGET_MS else "OVER"
    print(f"target: the check adds <= {TARGET_MS} ms per execution: {verdict} (worst {worst:.3f} ms)")
    return 0 if worst <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
