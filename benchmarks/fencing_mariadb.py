"""What fencing costs on MariaDB: fenced vs plain partition overwrite, 1 row and 100k rows.

Run from the repository root::

    python -m benchmarks.fencing_mariadb            # ~3-5 min, a MariaDB server of its own
    python -m benchmarks.fencing_mariadb --quick    # ~30 s smoke
    python -m benchmarks.fencing_mariadb --big-reps 40

The method is ``benchmarks/fencing.py``'s (PostgreSQL): every figure is a ratio against plain,
measured in the same run on the same database and connection, in ABBA pairs, each pair on a freshly
prepared table for the big size (untimed TRUNCATE + load), the median of per-pair ratios with a
sign-test 95 % interval, and an A/A control made the same way (``benchmarks/paired.py``). Plain is
the same DELETE + INSERT in one transaction at the same isolation (READ COMMITTED, which crashsafe
sets on its MySQL connections); fenced adds the token's short locked transaction, the fence
check's UPDATE and the store event (the crashsafe store on a SQLite file, or none). The server is
a throwaway ``mariadbd`` (``airflow_crashsafe.testing.mariadb``: no binary log, no flush at commit,
for both arms alike). Targets: added <= 1.5 ms at 1 row, <= 3 % at 100k rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.store import Store
from benchmarks.fencing import (
    AA,
    TARGET_ADDED_MS_1_ROW,
    TARGET_ADDED_PCT_100K,
    NullStore,
    fenced_step,
    plain_step,
)
from benchmarks.paired import Comparison, Summary, ci_text, load_average, pct, print_table, run_pairs, verdict

TABLE = "bench_fact"
FENCED = "fenced (store: SQLite file)"
NO_EVENT = "fenced (no store event)"
Step = Any


def body(cur: Any, rows: int) -> None:
    """DELETE the partition, INSERT its rows (server-side, from MariaDB's sequence engine)."""
    cur.execute(f"DELETE FROM {TABLE} WHERE part = %s", ("p",))
    if rows == 1:
        cur.execute(f"INSERT INTO {TABLE} (part, id, v) VALUES (%s, %s, %s)", ("p", 1, 1.0))
    else:
        cur.execute(f"INSERT INTO {TABLE} (part, id, v) SELECT 'p', seq, seq * 1.5 FROM seq_1_to_{int(rows)}")


def fresh_table(db: Db, rows: int) -> Step:
    """Untimed, before every pair: the partition loaded again, so every run deletes the same rows."""

    def prepare() -> None:
        with db.autocommit():
            db.execute(f"TRUNCATE TABLE {TABLE}")
            db.execute(
                f"INSERT INTO {TABLE} (part, id, v) SELECT 'p', seq, seq * 1.5 FROM seq_1_to_{int(rows)}"
            )

    return prepare


def setup(url: str) -> None:
    db = connect_url(url)
    try:
        with db.autocommit():
            db.execute(
                f"CREATE TABLE {TABLE} (part VARCHAR(16) NOT NULL, id INTEGER NOT NULL, v DOUBLE) "
                "ENGINE=InnoDB"
            )
            db.execute(f"CREATE INDEX {TABLE}_part ON {TABLE} (part)")
    finally:
        db.close()


def comparisons(db: Db, rows: int, stores: dict[str, Any]) -> list[Comparison]:
    base = plain_step(db, rows, body)
    comps = [Comparison(AA, base, plain_step(db, rows, body))]
    return comps + [
        Comparison(name, base, fenced_step(db, rows, store, body)) for name, store in stores.items()
    ]


def print_targets(big: int, one: dict[str, Summary], many: dict[str, Summary], out: dict[str, Any]) -> None:
    f1, fb, aa = one[FENCED], many[FENCED], many[AA]
    print("\n## Targets on MariaDB (fenced with the store event vs plain; median of pairs, 95 % CI)")
    added_ci = (f1.added_ci[0] * 1e3, f1.added_ci[1] * 1e3, f1.added_ci[2]) if f1.added_ci else None
    print(
        f"  1 row:        {f1.added * 1e3:+.3f} ms {ci_text(added_ci, lambda v: f'{v:+.3f}')}  "
        f"(target <= {TARGET_ADDED_MS_1_ROW} ms) {verdict(f1.added * 1e3, added_ci, TARGET_ADDED_MS_1_ROW)}"
    )
    print(
        f"  {big:,} rows: {pct(fb.ratio)} {ci_text(fb.ratio_ci, pct)}  (target <= {TARGET_ADDED_PCT_100K} %) "
        f"{verdict(fb.ratio, fb.ratio_ci, 1 + TARGET_ADDED_PCT_100K / 100)}"
    )
    print(f"  A/A control at {big:,} rows: {pct(aa.ratio)} {ci_text(aa.ratio_ci, pct)} (should straddle 0)")
    out["added_ms_1_row"], out["added_pct_big"] = f1.added * 1e3, (fb.ratio - 1) * 100
    out["aa_pct_big"] = (aa.ratio - 1) * 100


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fencing_mariadb", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mariadb-url", help="admin URL (mysql://root@host:port/mysql) of a MariaDB server")
    parser.add_argument("--quick", action="store_true", help="a ~30 s smoke run")
    parser.add_argument("--big-reps", type=int, default=None, help="ABBA pairs at 100k rows (default 20)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    pairs_1, pairs_big, big = (30, 6, 10_000) if args.quick else (150, 20, 100_000)
    pairs_big = args.big_reps or pairs_big
    logging.getLogger("airflow_crashsafe").setLevel(logging.ERROR)
    from airflow_crashsafe.testing.mariadb import drop_database, make_database, start_server

    out: dict[str, Any] = {"quick": args.quick}
    started = time.monotonic()
    server = None if args.mariadb_url else start_server()
    admin = args.mariadb_url or (server.admin_url if server else "")
    target = make_database(admin, prefix="bench_target")
    tmp = Path(tempfile.mkdtemp(prefix="crashsafe-bench-"))
    try:
        print(
            f"# fencing benchmark on MariaDB ({'given server' if args.mariadb_url else 'its own server'}); "
            f"{load_average()} at the start"
        )
        setup(target)
        store_url = f"sqlite:///{tmp / 'store.db'}"
        store = Store(lambda: connect_url(store_url), location=store_url)
        store.migrate()
        db = connect_url(target)
        try:
            stores = {FENCED: store, NO_EVENT: NullStore()}
            comps = comparisons(db, 1, stores)
            run_pairs(comps, pairs_1, warmup=5)
            one = print_table("Partition overwrite on MariaDB, 1 row(s)", comps)
            comps = comparisons(db, big, stores)
            run_pairs(comps, pairs_big, warmup=1, prepare=fresh_table(db, big))
            many = print_table(f"Partition overwrite on MariaDB, {big:,} row(s)", comps)
        finally:
            db.close()
            store.close()
    finally:
        drop_database(admin, target)
        if server is not None:
            server.stop()
    print_targets(big, one, many, out)
    print(f"\n# {load_average()} at the end; {time.monotonic() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
