"""Concurrent writers for the fencing benchmark: fenced commits per second on independent slots.

Each writer is a process with its own target connection and store; every commit writes one row
into ``bench_tp`` on a slot of its own. Importable by name, so ``multiprocessing`` can run it.
Writers are forked from a ``forkserver`` that imported crashsafe (and so Airflow) once
(:data:`PRELOAD`): sixteen spawned interpreters each importing Airflow cost more CPU than the
measurement itself, and only the seconds after the barrier are counted either way.
``measure_throughput`` runs them (plain, then fenced) and checks that no fenced commit was lost.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

__all__ = ["TP_TABLE", "create_tp_table", "measure_throughput", "writer"]

TP_TABLE = "bench_tp"
#: What every writer imports, imported once by the fork server.
PRELOAD = ["airflow_crashsafe.fencing", "airflow_crashsafe.store.store", "benchmarks.throughput", "psycopg"]


def create_tp_table(url: str) -> None:
    from airflow_crashsafe.store.dbapi import connect_url

    db = connect_url(url)
    try:
        db.begin()
        db.execute(
            f"CREATE TABLE IF NOT EXISTS {TP_TABLE} (phase TEXT NOT NULL, writer INTEGER NOT NULL, "
            "seq INTEGER NOT NULL, token BIGINT)"
        )
        db.commit()
    finally:
        db.close()


def _context(writer_id: int) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id="bench_tp",
        task_id=f"writer_{writer_id}",
        run_id="bench",
        map_index=-1,
        try_number=1,
        id=str(uuid.uuid4()),
    )
    return {"ti": ti, "dag_run": SimpleNamespace(logical_date=None, clear_number=0, run_id="bench")}


def writer(
    url: str, store_url: str | None, writer_id: int, phase: str, seconds: float, barrier: Any, results: Any
) -> None:
    """Commit as often as possible for ``seconds``; report how many commits this writer made."""
    from airflow_crashsafe.fencing import fenced_transaction
    from airflow_crashsafe.store.dbapi import connect_url
    from airflow_crashsafe.store.store import Store

    db = connect_url(url)
    store = Store(lambda: connect_url(store_url), location=store_url) if store_url else None
    insert = f"INSERT INTO {TP_TABLE} (phase, writer, seq, token) VALUES (%s, %s, %s, %s)"
    try:
        if store is not None:
            store.migrate()
        ctx = _context(writer_id)
        barrier.wait(timeout=120)
        deadline = time.perf_counter() + seconds
        commits = 0
        while time.perf_counter() < deadline:
            if phase == "fenced":
                with fenced_transaction(
                    "bench", TP_TABLE, context=ctx, slot_partition=f"{phase}-{commits}", db=db, store=store
                ) as tx:
                    tx.cursor.execute(insert, (phase, writer_id, commits, tx.token))
            else:
                db.begin()
                db.raw.cursor().execute(insert, (phase, writer_id, commits, None))
                db.commit()
            commits += 1
        results.put((writer_id, commits, None))
    except Exception as exc:  # reported to the parent, which fails the run
        results.put((writer_id, -1, f"{type(exc).__name__}: {exc}"))
    finally:
        db.close()
        if store is not None:
            store.close()


def measure_throughput(url: str, store_url: str, seconds: float, writers: int, out: dict[str, Any]) -> bool:
    """Commits/s of ``writers`` processes, plain then fenced; True when no commit was lost."""
    import multiprocessing

    from airflow_crashsafe.store import fences
    from airflow_crashsafe.store.dbapi import connect_url
    from airflow_crashsafe.store.store import Store

    create_tp_table(url)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    rates: dict[str, float] = {}
    reported: dict[str, int] = {}
    for phase in ("plain", "fenced"):
        barrier, results = ctx.Barrier(writers), ctx.Queue()
        procs = [
            ctx.Process(
                target=writer,
                args=(url, store_url if phase == "fenced" else None, i, phase, seconds, barrier, results),
            )
            for i in range(writers)
        ]
        for proc in procs:
            proc.start()
        answers = [results.get(timeout=seconds + 180) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        errors = [a[2] for a in answers if a[2]]
        if errors:
            raise RuntimeError(f"{phase} writers failed: {errors}")
        reported[phase] = sum(a[1] for a in answers)
        rates[phase] = reported[phase] / seconds
    db = connect_url(url)
    try:
        db.begin()
        rows = db.execute(f"SELECT count(*) FROM {TP_TABLE} WHERE phase = 'fenced'").fetchone()[0]
        fenced_rows = db.execute(
            f"SELECT count(*) FROM {fences.FENCE_TABLE} WHERE dag_id = 'bench_tp' "
            "AND committed_token IS NOT NULL AND committed_token = issued_token"
        ).fetchone()[0]
        db.rollback()
    finally:
        db.close()
    store = Store(lambda: connect_url(store_url), location=store_url)
    events = len(store.events(dag_id="bench_tp", kinds=["committed"]))
    store.close()
    ok = rows == fenced_rows == events == reported["fenced"]
    print(f"\n## Throughput, {writers} writer processes, independent slots, {seconds:.0f} s per phase")
    print(f"  plain commits/s  {rates['plain']:>9.1f}")
    print(f"  fenced commits/s {rates['fenced']:>9.1f}   ratio {rates['fenced'] / rates['plain']:.2f}")
    print(
        f"  lost-update check: writers reported {reported['fenced']} fenced commits; rows {rows}, "
        f"committed fence rows {fenced_rows}, committed events {events} -> {'OK' if ok else 'LOST'}"
    )
    out["throughput"] = {"plain_per_s": rates["plain"], "fenced_per_s": rates["fenced"], "lost_ok": ok}
    return ok
