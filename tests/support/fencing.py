"""Drive ``fenced_transaction`` from plain objects: contexts, an output table, attempt runners.

Shared by the fencing tests and the benchmark. Worker functions here are importable by name, so
``multiprocessing`` children (see ``processes.py``) can run them.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.identity import Slot
from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.fences import FenceState, read_fence
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import fake_context

__all__ = [
    "LOGICAL_DATE",
    "OUTPUT_TABLE",
    "AttemptSpec",
    "attempt_ctx",
    "create_output_table",
    "make_context",
    "output_rows",
    "ph",
    "read_fence_url",
    "run_attempt",
    "run_attempt_in_child",
]

OUTPUT_TABLE = "crashsafe_test_output"
LOGICAL_DATE = datetime(2024, 1, 2, tzinfo=timezone.utc)


def make_context(**overrides: Any) -> dict[str, Any]:
    """:func:`airflow_crashsafe.testing.fake_context` on the fencing tests' slot (dag, task, 2024-01-02)."""
    defaults: dict[str, Any] = {
        "dag_id": "dag",
        "task_id": "task",
        "run_id": "scheduled__2024-01-02",
        "logical_date": LOGICAL_DATE,
    }
    return fake_context(**(defaults | overrides))


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt of a slot in a test: its identity and how it behaves."""

    name: str
    try_number: int
    clear_number: int = 0
    dag_id: str = "dag"
    partition: str | None = None
    rows: int = 1
    overwrite: bool = True  # DELETE the partition before inserting (else append marker rows)
    jitter_ms: float = 0.0  # random sleep before the write and before the exit


def attempt_ctx(spec: AttemptSpec) -> dict[str, Any]:
    return make_context(
        dag_id=spec.dag_id, try_number=spec.try_number, ti_id=spec.name, clear_number=spec.clear_number
    )


def ph(db: Db) -> str:
    """The driver's positional placeholder, for SQL written in test bodies."""
    return "%s" if db.dialect.has_server_transactions else "?"


def create_output_table(db: Db) -> None:
    """The table attempts write to: partition + attempt + token, no unique key on purpose."""
    db.begin()
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {OUTPUT_TABLE} (slot_partition TEXT NOT NULL, "
        "attempt TEXT NOT NULL, try_number INTEGER NOT NULL, token BIGINT, row_no INTEGER NOT NULL)"
    )
    db.commit()


def write_output(tx: Any, partition: str, name: str, rows: int, overwrite: bool) -> None:
    """The body of a fenced write: optionally replace the partition, then insert this attempt's rows."""
    p = ph(tx.db)
    cur = tx.cursor
    if overwrite:
        cur.execute(f"DELETE FROM {OUTPUT_TABLE} WHERE slot_partition = {p}", (partition,))
    cur.executemany(
        f"INSERT INTO {OUTPUT_TABLE} (slot_partition, attempt, try_number, token, row_no) "
        f"VALUES ({p}, {p}, {p}, {p}, {p})",
        [(partition, name, tx.attempt.try_number, tx.token, i) for i in range(rows)],
    )


def output_rows(db: Db, partition: str) -> list[tuple[str, int, int | None]]:
    """(attempt, try_number, token) per committed output row of ``partition``."""
    db.begin(immediate=False)
    try:
        rows = db.execute(
            f"SELECT attempt, try_number, token FROM {OUTPUT_TABLE} WHERE slot_partition = %(p)s "
            "ORDER BY attempt, row_no",
            {"p": partition},
        ).fetchall()
    finally:
        db.rollback()
    return [(str(r[0]), int(r[1]), None if r[2] is None else int(r[2])) for r in rows]


def read_fence_url(url: str, slot: Slot, target: str) -> FenceState | None:
    db = connect_url(url)
    try:
        db.begin(immediate=False)
        try:
            return read_fence(db, slot, target)
        finally:
            db.rollback()
    finally:
        db.close()


def _sleep(jitter_ms: float, rng: random.Random) -> None:
    if jitter_ms > 0:
        time.sleep(rng.uniform(0, jitter_ms) / 1000.0)


def run_attempt(url: str, store: Store, spec: AttemptSpec, target: str = OUTPUT_TABLE) -> dict[str, Any]:
    """Run one attempt start to end on its own connection; report what happened to it."""
    rng = random.Random()
    db = connect_url(url)
    outcome: dict[str, Any] = {"name": spec.name, "try": spec.try_number, "clear": spec.clear_number}
    try:
        with fenced_transaction(
            "unused", target, context=attempt_ctx(spec), slot_partition=spec.partition, db=db, store=store
        ) as tx:
            outcome["token"] = tx.token
            if tx.already_committed:
                assert tx.committed_by is not None
                outcome["outcome"] = "already_committed"
                outcome["committed_by"] = tx.committed_by.ti_id
            else:
                _sleep(spec.jitter_ms, rng)
                write_output(tx, tx.slot.partition, spec.name, spec.rows, spec.overwrite)
                _sleep(spec.jitter_ms, rng)
        outcome.setdefault("outcome", "committed")
    except FencedOut as exc:
        outcome["outcome"] = "fenced_start" if exc.token is None else "fenced_commit"
        outcome["token"] = exc.token
    except Exception as exc:  # reported, so the test shows which attempt broke and how
        outcome["outcome"] = "error"
        outcome["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        db.close()
    return outcome


def run_attempt_in_child(url: str, store_url: str, spec: AttemptSpec, barrier: Any, results: Any) -> None:
    """``multiprocessing`` entry point: wait for the others, run the attempt, report on ``results``."""
    from airflow_crashsafe.store import open_store

    store = open_store(store_url)
    try:
        barrier.wait(timeout=120)
        results.put(run_attempt(url, store, spec))
    except Exception as exc:
        results.put({"name": spec.name, "outcome": "error", "error": f"{type(exc).__name__}: {exc}"})
    finally:
        store.close()
