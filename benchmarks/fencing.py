"""What fencing costs: fenced vs plain partition overwrite, and fenced commits/s under 8 writers.

Run from the repository root::

    python -m benchmarks.fencing                # ~6-8 min, a PostgreSQL cluster of its own
    python -m benchmarks.fencing --big-reps 40  # more 100k-row pairs: a narrower interval
    python -m benchmarks.fencing --quick        # ~20 s smoke
    python -m benchmarks.fencing --postgres-url postgresql://postgres@127.0.0.1:5433/postgres

PostgreSQL: ``--postgres-url`` (an admin URL; the benchmark creates and drops its own databases),
else ``$CRASHSAFE_BENCH_POSTGRES_URL``, else a cluster started for the benchmark alone (like the
test fixture's: fsync off for both arms alike; autovacuum off, so it never runs inside a timing).
Every figure is a ratio against plain, measured in the same run on the same database and
connection: paired runs in ABBA order, each on a freshly prepared table (untimed TRUNCATE, load,
VACUUM, CHECKPOINT), the median of the per-pair ratios with a sign-test 95 % interval, and an A/A
comparison made the same way (see ``benchmarks/paired.py``). A target is MET when the whole
interval is within it, MISSED when the whole interval is beyond it, else UNDECIDED: run more pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.identity import attempt_from_context, slot_from_context
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.store import Store
from benchmarks.paired import (
    ClusterCpu,
    Comparison,
    Quiet,
    Summary,
    ci_text,
    load_average,
    pct,
    print_block_verdict,
    print_table,
    run_pairs,
    sign_test_ci,
    verdict,
)
from benchmarks.throughput import measure_throughput

TABLE = "bench_fact"
TARGET_ADDED_MS_1_ROW = 1.5
TARGET_ADDED_PCT_100K = 3.0
FENCED = "fenced (store: PostgreSQL)"
AA = "plain again (A/A control)"

Step = Callable[[], None]


class NullStore:
    """A store that records nothing: what the fence costs without the store event."""

    def record_event(self, *args: Any, **kwargs: Any) -> None:
        return None


def bench_context(task_id: str) -> dict[str, Any]:
    """A task context of plain objects: what the fence reads its slot and attempt from."""
    ti = SimpleNamespace(
        dag_id="bench", task_id=task_id, run_id="bench", map_index=-1, try_number=1, id=str(uuid.uuid4())
    )
    return {"ti": ti, "dag_run": SimpleNamespace(logical_date=None, clear_number=0, run_id="bench")}


def _body(cur: Any, rows: int) -> None:
    """The partition overwrite: DELETE the partition, INSERT its rows (server-side for many rows)."""
    cur.execute(f"DELETE FROM {TABLE} WHERE part = %s", ("p",))
    if rows == 1:
        cur.execute(f"INSERT INTO {TABLE} (part, id, v) VALUES (%s, %s, %s)", ("p", 1, 1.0))
    else:
        cur.execute(
            f"INSERT INTO {TABLE} (part, id, v) SELECT %s, g, g * 1.5 FROM generate_series(1, %s) g",
            ("p", rows),
        )


Body = Callable[[Any, int], None]


def plain_step(db: Db, rows: int, body: Body) -> Step:
    """The write ``body`` in a plain transaction: the baseline every fenced variant is paired with."""

    def run() -> None:
        db.begin()
        try:
            body(db.raw.cursor(), rows)
            db.commit()
        except BaseException:
            db.rollback()
            raise

    return run


def fenced_step(db: Db, rows: int, store: Any, body: Body) -> Step:
    """The same ``body`` inside ``fenced_transaction`` (a fresh slot each run, so none is skipped)."""

    def run() -> None:
        with fenced_transaction(
            "bench",
            TABLE,
            context=bench_context(f"overwrite_{rows}"),
            slot_partition=uuid.uuid4().hex,
            db=db,
            store=store,
        ) as tx:
            body(tx.cursor, rows)

    return run


def _plain(db: Db, rows: int) -> Step:
    return plain_step(db, rows, _body)


def _fenced(db: Db, rows: int, store: Any) -> Step:
    return fenced_step(db, rows, store, _body)


def _fresh_table(db: Db, rows: int) -> Step:
    """Untimed, before every run: the same table state each time (the partition loaded, compact,
    analyzed, no dirty pages), so that no run pays for the bloat or checkpoint another left."""

    def prepare() -> None:
        with db.autocommit():
            db.execute(f"TRUNCATE {TABLE}")
            db.execute(
                f"INSERT INTO {TABLE} (part, id, v) "
                "SELECT 'p', g, g * 1.5 FROM generate_series(1, %(rows)s) g",
                {"rows": rows},
            )
            db.execute(f"VACUUM ANALYZE {TABLE}")
            with contextlib.suppress(Exception):  # CHECKPOINT needs a superuser (--postgres-url may not be)
                db.execute("CHECKPOINT")

    return prepare


def _operator_steps(target: str, rows: int) -> tuple[Step, Step] | None:
    """Plain on a connection of its own, and PartitionOverwriteOperator.execute end to end.

    The operator opens its own connection (hook) per run and records into the configured store
    (``crashsafe_default``, pointed at the benchmark's store database by the caller).
    """
    try:
        from airflow_crashsafe.operators.sql import PartitionOverwriteOperator
    except ImportError:
        return None
    os.environ["AIRFLOW_CONN_BENCH_TARGET"] = target

    def plain_own_connection() -> None:
        own = connect_url(target)
        try:
            _plain(own, rows)()
        finally:
            own.close()

    def operator() -> None:
        op = PartitionOverwriteOperator(
            task_id=f"op_{rows}",
            conn_id="bench_target",
            target_table=TABLE,
            partition={"part": "p"},
            sql=f"SELECT 'p' AS part, g AS id, g * 1.5 AS v FROM generate_series(1, {int(rows)}) g",
            slot_partition=uuid.uuid4().hex,
        )
        op.execute(bench_context(f"op_{rows}"))

    return plain_own_connection, operator


def _measure_operator(
    db: Db, target: str, store_db: str, pairs_1: int, pairs_big: int, big: int, out: dict[str, Any]
) -> None:
    os.environ["AIRFLOW_CONN_CRASHSAFE_DEFAULT"] = store_db  # the operator's store
    # Airflow logs a warning per execute() outside the task runner; not what is measured here.
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "ERROR")
    if _operator_steps(target, 1) is None:
        print("\n(PartitionOverwriteOperator not available; skipped)")
        return
    # Importing Airflow turns on its logging; a line per commit/execute is not what is measured.
    for name in ("airflow_crashsafe", "airflow.task"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for rows, pairs in ((1, pairs_1), (big, pairs_big)):
        steps = _operator_steps(target, rows)
        assert steps is not None
        comp = Comparison("PartitionOverwriteOperator", *steps)
        # No CPU figure: each run's backend exits with its connection, taking its CPU time along.
        run_pairs([comp], pairs, warmup=1, prepare=_fresh_table(db, rows) if rows > 1 else None)
        _print_paired(
            rows, [comp], out, title="PartitionOverwriteOperator.execute vs plain, each on its own connection"
        )


def _print_paired(rows: int, comps: list[Comparison], out: dict[str, Any], title: str) -> dict[str, Summary]:
    sums = print_table(f"{title}, {rows:,} row(s)", comps)
    for name, sm in sums.items():
        out[f"{rows}:{title}:{name}"] = sm.as_dict()
    return sums


def round_trip(db: Db, reps: int) -> float:
    """p50 seconds of one ``SELECT 1`` round trip on the target connection."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        db.execute("SELECT 1").fetchone()
        times.append(time.perf_counter() - start)
    db.rollback()
    return statistics.median(times)


def stages(db: Db, store: Any, rows: int, prepare: Step | None, body: Body = _body) -> dict[str, float]:
    """fenced_transaction's stages, timed one by one (same calls, same order), then plain's."""
    ctx = bench_context(f"stages_{rows}")
    slot, attempt = slot_from_context(ctx, uuid.uuid4().hex), attempt_from_context(ctx)
    if prepare:
        prepare()
    t0 = time.perf_counter()
    issue = fences.issue_token(db, slot, TABLE, attempt)
    assert issue.token is not None
    t1 = time.perf_counter()
    db.begin(immediate=False)
    body(db.raw.cursor(), rows)
    t2 = time.perf_counter()
    assert fences.commit_token(db, slot, TABLE, attempt, issue.token)
    t3 = time.perf_counter()
    db.commit()
    t4 = time.perf_counter()
    store.record_event("committed", slot, TABLE, attempt, token=issue.token, detail={})
    t5 = time.perf_counter()
    if prepare:
        prepare()
    t6 = time.perf_counter()
    db.begin()
    body(db.raw.cursor(), rows)
    t7 = time.perf_counter()
    db.commit()
    t8 = time.perf_counter()
    return {
        "fenced: issue_token (own tx)": t1 - t0,
        "fenced: body": t2 - t1,
        "fenced: fence check UPDATE": t3 - t2,
        "fenced: commit": t4 - t3,
        "fenced: store event": t5 - t4,
        "plain: body": t7 - t6,
        "plain: commit": t8 - t7,
    }


def print_stages(
    rows: int, stages: list[dict[str, float]], rtt: float, out: dict[str, Any], store: str = "PostgreSQL"
) -> None:
    what = "1-row" if rows == 1 else f"{rows:,}-row"
    print(
        f"\n## Where the fenced {what} time goes (p50 per stage of {len(stages)} runs, ms; store on {store})"
    )
    print(f"  {'(one SELECT 1 round trip)':<30}{rtt * 1e3:>9.3f}")
    out["round_trip_ms"] = rtt * 1e3
    p50 = {key: statistics.median(s[key] for s in stages) * 1e3 for key in stages[0]}
    for key, value in p50.items():
        out[f"stage:{rows}:{key}"] = value
        print(f"  {key:<30}{value:>9.3f}")
    added = sum(p50[f"fenced: {k}"] for k in ("issue_token (own tx)", "fence check UPDATE", "store event"))
    plain = p50["plain: body"] + p50["plain: commit"]
    print(
        f"  {'=> added by stages (sum p50)':<30}{added:>9.3f}   of which store event "
        f"{p50['fenced: store event']:.3f}; {added / plain * 100:.2f} % of plain's {plain:.3f}"
    )
    # Per run: what fenced spends outside the body (the same SQL on the same connection) beyond
    # plain's commit, over plain's time. Short stages carry little of the machine's noise.
    outside = [
        s["fenced: issue_token (own tx)"]
        + s["fenced: fence check UPDATE"]
        + s["fenced: commit"]
        + s["fenced: store event"]
        - s["plain: commit"]
        for s in stages
    ]
    ratios = [1 + o / (s["plain: body"] + s["plain: commit"]) for o, s in zip(outside, stages, strict=True)]
    ms_ci = sign_test_ci([o * 1e3 for o in outside])
    print(
        f"  {'=> fenced outside the body':<30}{statistics.median(outside) * 1e3:>9.3f} "
        f"{ci_text(ms_ci, lambda v: f'{v:.3f}')} ms beyond plain's commit, "
        f"{pct(statistics.median(ratios))} {ci_text(sign_test_ci(ratios), pct)} of plain (per run, 95 % CI)"
    )
    out[f"stage:{rows}:outside_ratio_p50"] = statistics.median(ratios)
    out[f"stage:{rows}:outside_ratio_ci"] = sign_test_ci(ratios)


@contextmanager
def postgres_admin(url: str | None) -> Iterator[tuple[str, str]]:
    """(admin URL, where it came from): the given URL, the env var, or a throwaway cluster."""
    url = url or os.environ.get("CRASHSAFE_BENCH_POSTGRES_URL")
    if url:
        yield url, "given server"
        return
    from airflow_crashsafe.testing.postgres import start_cluster

    cluster = start_cluster()
    try:
        yield cluster.admin_url, "throwaway cluster (fsync=off, synchronous_commit=off)"
    finally:
        cluster.stop()


def _setup_target(url: str) -> None:
    db = connect_url(url)
    try:
        db.begin()
        db.execute(f"CREATE TABLE {TABLE} (part TEXT NOT NULL, id INTEGER NOT NULL, v DOUBLE PRECISION)")
        db.execute(f"CREATE INDEX {TABLE}_part ON {TABLE} (part)")
        db.commit()
    finally:
        db.close()


@contextmanager
def _bench_server(url: str | None) -> Iterator[tuple[str, str, ClusterCpu | None]]:
    """(admin URL, what it is, its CPU meter when it runs here): a given server, else a cluster of
    our own, with autovacuum off so that it never starts inside a timing."""
    with postgres_admin(url) as (admin, origin):
        if origin != "given server":
            import psycopg

            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET autovacuum = off")
                conn.execute("SELECT pg_reload_conf()")
            origin = f"a cluster of its own: {origin.split('(', 1)[1][:-1]}, autovacuum=off"
        yield admin, origin, ClusterCpu.of_server(admin)


def _overwrite_comparisons(db: Db, rows: int, stores: dict[str, Any]) -> list[Comparison]:
    """A/A control and each fenced variant, every one against plain on the same connection."""
    plain = _plain(db, rows)
    comps = [Comparison(AA, plain, _plain(db, rows))]
    comps += [Comparison(name, plain, _fenced(db, rows, store)) for name, store in stores.items()]
    return comps


def _print_targets(big: int, one: dict[str, Summary], many: dict[str, Summary], out: dict[str, Any]) -> None:
    f1, fb, aa = one[FENCED], many[FENCED], many[AA]
    target = TARGET_ADDED_PCT_100K
    print("\n## Targets (fenced with the store event on PostgreSQL vs plain; median of pairs, 95 % CI)")
    added_ci = (f1.added_ci[0] * 1e3, f1.added_ci[1] * 1e3, f1.added_ci[2]) if f1.added_ci else None
    print(
        f"  1 row:        {f1.added * 1e3:+.3f} ms {ci_text(added_ci, lambda v: f'{v:+.3f}')}  "
        f"(target <= {TARGET_ADDED_MS_1_ROW} ms) {verdict(f1.added * 1e3, added_ci, TARGET_ADDED_MS_1_ROW)}"
    )
    ratio_ci = fb.ratio_ci
    print(
        f"  {big:,} rows: {pct(fb.ratio)} {ci_text(ratio_ci, pct)}  (target <= {target} %) "
        f"{verdict(fb.ratio, ratio_ci, 1 + target / 100)}"
    )
    if added_ci:  # the fixed cost measured at 1 row, over plain's time at the big size
        base = many[FENCED].a_p50 * 1e3
        print(
            f"  {big:,} rows, implied by the 1-row fixed cost over plain's p50 ({base:.1f} ms): "
            f"{f1.added * 1e3 / base * 100:+.2f} % [{added_ci[0] / base * 100:+.2f} %, "
            f"{added_ci[1] / base * 100:+.2f} %]"
        )
    outside, outside_ci = out.get(f"stage:{big}:outside_ratio_p50"), out.get(f"stage:{big}:outside_ratio_ci")
    if outside is not None:
        print(
            f"  {big:,} rows, fenced outside the body (stages, per run): {pct(outside)} "
            f"{ci_text(outside_ci, pct)}  {verdict(outside, outside_ci, 1 + target / 100)}"
        )
    if fb.cpu_ratio is not None:
        print(f"  {big:,} rows, server CPU: {pct(fb.cpu_ratio)} {ci_text(fb.cpu_ratio_ci, pct)}")
    print(f"  A/A control at {big:,} rows: {pct(aa.ratio)} {ci_text(aa.ratio_ci, pct)} (should straddle 0)")
    out["added_pct_big_block_ci"], out["aa_pct_big_block_ci"] = print_block_verdict(
        f"{big:,} rows", fb, aa, 1 + target / 100
    )
    out["added_ms_1_row"], out["added_pct_big"] = f1.added * 1e3, (fb.ratio - 1) * 100
    out["added_pct_big_ci"] = [(v - 1) * 100 for v in ratio_ci[:2]] if ratio_ci else None
    out["aa_pct_big"] = (aa.ratio - 1) * 100
    out["aa_pct_big_ci"] = [(v - 1) * 100 for v in aa.ratio_ci[:2]] if aa.ratio_ci else None


def run(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fencing", description=__doc__.split("\n")[0])
    parser.add_argument("--postgres-url", help="admin URL of a PostgreSQL server to benchmark on")
    parser.add_argument("--quick", action="store_true", help="a ~20 s smoke run")
    parser.add_argument("--json", help="also write the numbers to this file")
    parser.add_argument(
        "--big-reps",
        type=int,
        default=None,
        help="ABBA pairs per comparison at 100k rows (default 20; more narrows the interval)",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=0.0,
        help="seconds each pair may wait for a quiet machine (default 0: do not wait)",
    )
    parser.add_argument(
        "--quiet-cores",
        type=float,
        default=0.5,
        help="quiet means other processes keep fewer than this many cores busy (default 0.5)",
    )
    args = parser.parse_args(argv)
    quiet = Quiet(args.quiet_cores, args.quiet_wait) if args.quiet_wait > 0 else None
    pairs_1, pairs_big, big, tp_seconds = (30, 6, 10_000, 1.5) if args.quick else (150, 20, 100_000, 8.0)
    pairs_big = args.big_reps or pairs_big
    from airflow_crashsafe.testing.postgres import drop_database, make_database

    out: dict[str, Any] = {"quick": args.quick}
    started = time.monotonic()
    with _bench_server(args.postgres_url) as (admin, origin, cpu):
        target, store_db = (
            make_database(admin, prefix="bench_target"),
            make_database(admin, prefix="bench_store"),
        )
        try:
            print(f"# fencing benchmark on PostgreSQL ({origin}); {load_average()} at the start")
            print(f"# server CPU: {'all processes of the cluster' if cpu else 'n/a (not a local cluster)'}")
            _setup_target(target)
            pg_store = Store(lambda: connect_url(store_db), location=store_db)
            mem_store = Store(lambda: connect_url("sqlite:///:memory:"), location=":memory:")
            pg_store.migrate()
            mem_store.migrate()
            null_store = NullStore()
            db = connect_url(target)
            try:
                stores = {FENCED: pg_store, "fenced (store: SQLite mem)": mem_store}
                comps = _overwrite_comparisons(db, 1, {**stores, "fenced (no store event)": null_store})
                run_pairs(comps, pairs_1, warmup=5, cpu=cpu, quiet=quiet)
                one = _print_paired(1, comps, out, "Partition overwrite")
                runs = [stages(db, pg_store, 1, None) for _ in range(pairs_1)]
                print_stages(1, runs, round_trip(db, pairs_1), out)
                fresh = _fresh_table(db, big)
                comps = _overwrite_comparisons(
                    db, big, {FENCED: pg_store, "fenced (no store event)": null_store}
                )
                run_pairs(comps, pairs_big, warmup=1, prepare=fresh, cpu=cpu, quiet=quiet)
                many = _print_paired(big, comps, out, "Partition overwrite")
                runs = [stages(db, pg_store, big, fresh) for _ in range(max(6, pairs_big // 2))]
                print_stages(big, runs, round_trip(db, pairs_1), out)
                if not args.quick:  # after the core comparison: importing Airflow changes logging
                    _measure_operator(db, target, store_db, pairs_1 // 4, max(6, pairs_big // 3), big, out)
            finally:
                db.close()
            ok = measure_throughput(target, store_db, tp_seconds, 8, out)
            pg_store.close()
            mem_store.close()
        finally:
            drop_database(admin, target)
            drop_database(admin, store_db)
    _print_targets(big, one, many, out)
    print(f"\n# {load_average()} at the end; {time.monotonic() - started:.0f} s")
    out["lost_ok"] = ok
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return out


def main(argv: list[str] | None = None) -> int:
    out = run(argv)
    return 0 if out["lost_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
