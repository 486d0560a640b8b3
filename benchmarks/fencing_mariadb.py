"""What fencing costs on MariaDB: fenced vs plain partition overwrite, 1 row and 100k rows.

Run from the repository root::

    python -m benchmarks.fencing_mariadb            # ~12-15 min, a MariaDB server of its own
    python -m benchmarks.fencing_mariadb --quick    # ~1 min smoke
    python -m benchmarks.fencing_mariadb --big-reps 40
    python -m benchmarks.fencing_mariadb --one-row-only   # ~1 min: the 1-row comparison alone

The method is ``benchmarks/fencing.py``'s (PostgreSQL): every figure is a ratio against plain,
measured in the same run on the same database and connection, in ABBA pairs (BAAB every other
round), the median of per-pair ratios with a sign-test 95 % interval, and an A/A control made the
same way (``benchmarks/paired.py``). Plain is the same DELETE + INSERT in one transaction at the
same isolation (READ COMMITTED, which crashsafe sets on its MySQL connections); fenced adds the
token's short transaction (its upsert and COMMIT), the fence check's UPDATE and the store event
(the crashsafe store on a SQLite file, or none). Targets: added <= 1.5 ms at 1 row, <= 3 % at 100k.

At 100k rows the machine's noise, not fencing, decided the interval, so each run starts from the
same server state: its own ``mariadbd`` (``airflow_crashsafe.testing.mariadb``: no binary log, no
flush at commit, for both arms alike) with a buffer pool that holds the table, and before every
timed run (untimed) the table truncated, loaded, analyzed and flushed (``FLUSH TABLES ... FOR
EXPORT``), and InnoDB's purge of the earlier runs' undo log waited for. Two measures carry less
noise than the wall clock: the CPU time of the connection's server thread (``/proc``, through
``PROCESSLIST.TID``: what the server did for this connection, not the time it waited for a core),
and, per run, what fenced spends outside the body (the same statements on the same connection)
over plain's time. The wall-clock verdict is the target's; the other two say whether its
interval is wide because of the machine or because of fencing. A fourth, the ratio of each arm's
fastest decile of runs (bootstrap interval, ``paired.low_quantile_ratio``), keeps the wall clock
but drops the runs that other work slowed down most. And since the machine's speed drifts over
seconds, neighbouring pairs are not independent as the sign test assumes: the 100k median is also
given a moving-block bootstrap interval (``paired.block_bootstrap_ci``), which does not assume it.
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
    print_stages,
    round_trip,
    stages,
)
from benchmarks.paired import (
    Comparison,
    Summary,
    ci_text,
    load_average,
    low_quantile_ratio,
    pct,
    print_block_verdict,
    print_table,
    run_pairs,
    verdict,
)

TABLE = "bench_fact"
FENCED = "fenced (store: SQLite file)"
NO_EVENT = "fenced (no store event)"
# The table (100k rows, its index, the undo of a run) fits many times over; the rest as in tests.
SERVER_OPTIONS = ("--innodb-buffer-pool-size=1G",)
PURGE_WAIT_SECONDS = 10.0
# The VM's CPU speed drifts over a few seconds (successive 100k runs correlate, r = 0.37), so a
# pair is not independent of the next; the block bootstrap resamples runs of this many pairs.
BLOCK_PAIRS = 4
Step = Any


class ThreadCpu:
    """CPU seconds used so far by one connection's server thread (``/proc/<pid>/task/<tid>``)."""

    def __init__(self, stat: Path) -> None:
        self.stat = stat

    def refresh(self) -> None:
        return None  # one thread for the whole run

    def seconds(self) -> float:
        return int(self.stat.read_text().split()[0]) / 1e9

    @classmethod
    def of(cls, db: Db, server_pid: int | None) -> ThreadCpu | None:
        """The meter of ``db``'s thread when its server runs here (MariaDB 10.5+ shows the TID)."""
        if server_pid is None:
            return None
        try:
            tid = db.execute("SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
            meter = cls(Path(f"/proc/{server_pid}/task/{int(tid.fetchone()[0])}/schedstat"))
            db.rollback()
            return meter if meter.seconds() > 0 else None
        except (OSError, ValueError, TypeError, IndexError):
            return None
        except Exception:  # no TID column: an older server or MySQL
            db.rollback()
            return None


def body(cur: Any, rows: int) -> None:
    """DELETE the partition, INSERT its rows (server-side, from MariaDB's sequence engine)."""
    cur.execute(f"DELETE FROM {TABLE} WHERE part = %s", ("p",))
    if rows == 1:
        cur.execute(f"INSERT INTO {TABLE} (part, id, v) VALUES (%s, %s, %s)", ("p", 1, 1.0))
    else:
        cur.execute(f"INSERT INTO {TABLE} (part, id, v) SELECT 'p', seq, seq * 1.5 FROM seq_1_to_{int(rows)}")


def fresh_table(db: Db, rows: int) -> Step:
    """Untimed, before every run: the same table state each time (the partition loaded, analyzed,
    its pages flushed), and the purge of earlier runs' undo log done, so no run pays for another's."""

    def prepare() -> None:
        with db.autocommit():
            db.execute(f"TRUNCATE TABLE {TABLE}")
            db.execute(
                f"INSERT INTO {TABLE} (part, id, v) SELECT 'p', seq, seq * 1.5 FROM seq_1_to_{int(rows)}"
            )
            db.execute(f"ANALYZE TABLE {TABLE}").fetchall()
            db.execute(f"FLUSH TABLES {TABLE} FOR EXPORT")
            db.execute("UNLOCK TABLES")
            deadline = time.monotonic() + PURGE_WAIT_SECONDS
            while _history_length(db) > 0 and time.monotonic() < deadline:
                time.sleep(0.01)

    return prepare


def _history_length(db: Db) -> int:
    """InnoDB's undo log records not purged yet (0 when purge has caught up)."""
    row = db.execute(
        "SELECT `count` FROM information_schema.INNODB_METRICS WHERE name = 'trx_rseg_history_len'"
    ).fetchone()
    return int(row[0]) if row else 0


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


def work_counts(db: Db) -> dict[str, int]:
    """This session's row operations so far (``Handler_*``) and temporary tables made."""
    rows = db.execute(
        "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler%%' OR Variable_name LIKE 'Created_tmp%%'"
    ).fetchall()
    db.rollback()
    return {str(name): int(value) for name, value in rows}


def print_work(
    db: Db, rows: int, plain: Step, fenced: Step, prepare: Step | None, out: dict[str, Any]
) -> None:
    """Row operations of one plain and one fenced run: no noise, so whether fenced does more per
    row (a second scan, a temporary table, the source read twice) shows as a count, not a %."""
    done = {}
    for name, step in (("plain", plain), ("fenced", fenced)):
        if prepare:
            prepare()
        before = work_counts(db)
        step()
        done[name] = {k: v - before[k] for k, v in work_counts(db).items()}
    differ = {
        k: (done["plain"][k], done["fenced"][k])
        for k in done["plain"]
        if done["plain"][k] != done["fenced"][k]
    }
    print(f"\n## Row operations of one run at {rows:,} row(s) (Handler_*, Created_tmp_*: plain -> fenced)")
    for key, (a, b) in sorted(differ.items()):
        print(f"  {key:<32}{a:>12,} -> {b:>12,}  ({b - a:+,})")
    same = sum(1 for k in done["plain"] if k not in differ and done["plain"][k])
    print(f"  ({same} other non-zero counters equal)")
    out[f"work:{rows}"] = {k: list(v) for k, v in differ.items()}


def _ci_pct(ci: tuple[float, float, float] | None) -> list[float] | None:
    return [(v - 1) * 100 for v in ci[:2]] if ci else None


def print_targets(
    big: int, one: dict[str, Summary], many: dict[str, Summary], comps: list[Comparison], out: dict[str, Any]
) -> None:
    fb, aa = many[FENCED], many[AA]
    fenced_big, aa_big = (next(c for c in comps if c.name == name) for name in (FENCED, AA))
    limit = 1 + TARGET_ADDED_PCT_100K / 100
    print_one_row_target(one, out)
    print(
        f"  {big:,} rows: {pct(fb.ratio)} {ci_text(fb.ratio_ci, pct)}  (target <= {TARGET_ADDED_PCT_100K} %) "
        f"{verdict(fb.ratio, fb.ratio_ci, limit)}"
    )
    print(f"  A/A control at {big:,} rows: {pct(aa.ratio)} {ci_text(aa.ratio_ci, pct)} (should straddle 0)")
    out["added_pct_big_block_ci"], out["aa_pct_big_block_ci"] = print_block_verdict(
        f"{big:,} rows", fb, aa, limit, BLOCK_PAIRS
    )
    (low, low_ci), (aa_low, aa_low_ci) = low_quantile_ratio(fenced_big), low_quantile_ratio(aa_big)
    print(
        f"  {big:,} rows, fastest decile of each arm (bootstrap CI): {pct(low)} {ci_text(low_ci, pct)} "
        f"{verdict(low, low_ci, limit)}; A/A {pct(aa_low)} {ci_text(aa_low_ci, pct)}"
    )
    out["p10_pct_big"], out["p10_pct_big_ci"] = (low - 1) * 100, _ci_pct(low_ci)
    out["aa_p10_pct_big"], out["aa_p10_pct_big_ci"] = (aa_low - 1) * 100, _ci_pct(aa_low_ci)
    if fb.cpu_ratio is not None and aa.cpu_ratio is not None:
        print(
            f"  {big:,} rows, server thread CPU: {pct(fb.cpu_ratio)} {ci_text(fb.cpu_ratio_ci, pct)} "
            f"{verdict(fb.cpu_ratio, fb.cpu_ratio_ci, limit)}; A/A {pct(aa.cpu_ratio)} "
            f"{ci_text(aa.cpu_ratio_ci, pct)}"
        )
        out["cpu_pct_big"], out["cpu_pct_big_ci"] = (fb.cpu_ratio - 1) * 100, _ci_pct(fb.cpu_ratio_ci)
        out["aa_cpu_pct_big"], out["aa_cpu_pct_big_ci"] = (aa.cpu_ratio - 1) * 100, _ci_pct(aa.cpu_ratio_ci)
    outside, outside_ci = out.get(f"stage:{big}:outside_ratio_p50"), out.get(f"stage:{big}:outside_ratio_ci")
    if outside is not None:
        print(
            f"  {big:,} rows, fenced outside the body (per run): {pct(outside)} {ci_text(outside_ci, pct)} "
            f"{verdict(outside, outside_ci, limit)}"
        )
    out["added_pct_big"], out["added_pct_big_ci"] = (fb.ratio - 1) * 100, _ci_pct(fb.ratio_ci)
    out["aa_pct_big"], out["aa_pct_big_ci"] = (aa.ratio - 1) * 100, _ci_pct(aa.ratio_ci)


def print_one_row_target(one: dict[str, Summary], out: dict[str, Any]) -> None:
    f1 = one[FENCED]
    print("\n## Targets on MariaDB (fenced with the store event vs plain; median of pairs, 95 % CI)")
    added_ci = (f1.added_ci[0] * 1e3, f1.added_ci[1] * 1e3, f1.added_ci[2]) if f1.added_ci else None
    print(
        f"  1 row:        {f1.added * 1e3:+.3f} ms {ci_text(added_ci, lambda v: f'{v:+.3f}')}  "
        f"(target <= {TARGET_ADDED_MS_1_ROW} ms) {verdict(f1.added * 1e3, added_ci, TARGET_ADDED_MS_1_ROW)}"
    )
    out["added_ms_1_row"], out["added_ms_1_row_ci"] = f1.added * 1e3, list(added_ci[:2]) if added_ci else None


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fencing_mariadb", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--mariadb-url", help="admin URL (mysql://root@host:port/mysql) of a MariaDB server")
    parser.add_argument("--quick", action="store_true", help="a ~1 min smoke run")
    parser.add_argument("--big-reps", type=int, default=None, help="ABBA pairs at 100k rows (default 30)")
    parser.add_argument("--one-row-only", action="store_true", help="only the 1-row comparison (~1 min)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args(argv)
    pairs_1, pairs_big, big = (30, 6, 10_000) if args.quick else (150, 30, 100_000)
    pairs_big = args.big_reps or pairs_big
    logging.getLogger("airflow_crashsafe").setLevel(logging.ERROR)
    from airflow_crashsafe.testing.mariadb import drop_database, make_database, start_server

    out: dict[str, Any] = {"quick": args.quick, "load_start": load_average()}
    started = time.monotonic()
    server = None if args.mariadb_url else start_server(options=SERVER_OPTIONS)
    admin = args.mariadb_url or (server.admin_url if server else "")
    target = make_database(admin, prefix="bench_target")
    tmp = Path(tempfile.mkdtemp(prefix="crashsafe-bench-"))
    try:
        print(
            f"# fencing benchmark on MariaDB ({'given server' if server is None else 'its own server'}); "
            f"{load_average()} at the start"
        )
        setup(target)
        store_url = f"sqlite:///{tmp / 'store.db'}"
        store = Store(lambda: connect_url(store_url), location=store_url)
        store.migrate()
        db = connect_url(target)
        try:
            cpu = ThreadCpu.of(db, server.process.pid if server and server.process else None)
            print(f"# server CPU: {'the connection thread' if cpu else 'n/a (not a server of our own)'}")
            comps = comparisons(db, 1, {FENCED: store, NO_EVENT: NullStore()})
            run_pairs(comps, pairs_1, warmup=5, cpu=cpu)
            one = print_table("Partition overwrite on MariaDB, 1 row(s)", comps)
            runs = [stages(db, store, 1, None, body) for _ in range(pairs_1)]
            print_stages(1, runs, round_trip(db, pairs_1), out, store="a SQLite file")
            print_work(db, 1, plain_step(db, 1, body), fenced_step(db, 1, NullStore(), body), None, out)
            if args.one_row_only:
                print_one_row_target(one, out)
            else:
                fresh = fresh_table(db, big)
                comps = comparisons(db, big, {FENCED: store})
                run_pairs(comps, pairs_big, warmup=1, prepare=fresh, cpu=cpu)
                many = print_table(f"Partition overwrite on MariaDB, {big:,} row(s)", comps)
                runs = [stages(db, store, big, fresh, body) for _ in range(max(6, pairs_big // 2))]
                print_stages(big, runs, round_trip(db, pairs_1), out, store="a SQLite file")
                print_work(
                    db, big, plain_step(db, big, body), fenced_step(db, big, NullStore(), body), fresh, out
                )
        finally:
            db.close()
            store.close()
    finally:
        drop_database(admin, target)
        if server is not None:
            server.stop()
    if not args.one_row_only:
        print_targets(big, one, many, comps, out)
        out["runs_big_ms"] = {
            c.name: [[[r.wall * 1e3 for r in p.a], [r.wall * 1e3 for r in p.b]] for p in c.pairs]
            for c in comps
        }
    out["load_end"], out["seconds"] = load_average(), time.monotonic() - started
    print(f"\n# {out['load_end']} at the end; {out['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


def main(argv: list[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
