"""Many attempts of one slot at once, from threads and from processes, on every engine."""

from __future__ import annotations

import random
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from airflow_crashsafe.identity import slot_from_context
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.store import EVENT_KINDS, Store
from tests.support.engines import ENGINES
from tests.support.fencing import (
    OUTPUT_TABLE,
    AttemptSpec,
    attempt_ctx,
    create_output_table,
    output_rows,
    read_fence_url,
    run_attempt,
    run_attempt_in_child,
)
from tests.support.processes import race_context, start_children

pytestmark = pytest.mark.integration

# One process at a time may open a DuckDB file for writing: a process race cannot happen there.
# Snowflake (fakesnow): concurrent sessions were not shown to finish on the emulator (see the thread race).
ONE_WRITER_PROCESS_AT_A_TIME_EXCLUDED = [e for e in ENGINES if e not in ("duckdb", "snowflake")]

ROWS = 5


def _specs(count: int, dag_id: str, seed: int) -> list[AttemptSpec]:
    """Random tries 1..5; tries above a random cut belong to the next clear generation."""
    rng = random.Random(seed)
    cut = rng.randint(2, 5)  # 5: everything in generation 0
    specs = []
    for i in range(count):
        try_number = rng.randint(1, 5)
        specs.append(
            AttemptSpec(
                name=f"a{i}-try{try_number}",
                try_number=try_number,
                clear_number=0 if try_number <= cut else 1,
                dag_id=dag_id,
                rows=ROWS,
                jitter_ms=5.0,
            )
        )
    return specs


def _prepare(url: str) -> None:
    db = connect_url(url)
    try:
        create_output_table(db)
    finally:
        db.close()


def _check_race(url: str, store: Store, specs: list[AttemptSpec], outcomes: list[dict[str, Any]]) -> None:
    """The invariants any interleaving must keep (the winner itself is up to the race)."""
    assert [o for o in outcomes if o["outcome"] == "error"] == []
    assert len(outcomes) == len(specs)
    committed = [o for o in outcomes if o["outcome"] == "committed"]
    per_generation = Counter(o["clear"] for o in committed)
    assert all(n == 1 for n in per_generation.values()), per_generation
    newest_generation = max(s.clear_number for s in specs)
    winner = next(o for o in committed if o["clear"] == newest_generation)
    # A generation's commit is older than the next generation's: tokens grow with it.
    assert [o["token"] for o in sorted(committed, key=lambda o: o["clear"])] == sorted(
        o["token"] for o in committed
    )
    slot = slot_from_context(attempt_ctx(specs[0]))
    fence = read_fence_url(url, slot, OUTPUT_TABLE)
    assert fence is not None
    assert fence.committed is not None
    # The committed output is the newest issued attempt's.
    assert fence.issued_token == fence.committed.token == winner["token"]
    assert fence.committed.ti_id == winner["name"]
    assert fence.committed.clear_number == newest_generation
    db = connect_url(url)
    try:
        rows = output_rows(db, slot.partition)
    finally:
        db.close()
    assert rows == [(winner["name"], winner["try"], winner["token"])] * ROWS
    # Nothing newer than the winner was turned away as stale.
    fenced = [o for o in outcomes if o["outcome"].startswith("fenced")]
    assert all(o["try"] <= winner["try"] for o in fenced if o["clear"] == newest_generation)
    # A retry of a done slot names the attempt that committed its generation.
    by_generation = {o["clear"]: o["name"] for o in committed}
    for o in outcomes:
        if o["outcome"] == "already_committed":
            assert o["committed_by"] == by_generation[o["clear"]], o
    assert fence.rejected_count == len(fenced)
    kinds = Counter(e["kind"] for e in store.events(dag_id=specs[0].dag_id, kinds=EVENT_KINDS))
    assert (
        kinds
        == Counter(
            {"committed": len(committed), "fenced_out": len(fenced)}
            | {"skipped_committed": sum(o["outcome"] == "already_committed" for o in outcomes)}
        )
        - Counter()
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_thread_race_keeps_only_the_newest_attempts_output(target_url: str, store: Store, seed: int) -> None:
    """16 threads racing on one slot leave exactly the newest issued attempt's rows, one per generation."""
    if target_url.startswith("snowflake:"):
        pytest.skip(
            "Snowflake emulator: 16 concurrent sessions on fakesnow's server did not finish within "
            "the test timeout (DuckDB under it has no lock waits); not proven, see docs/databases.md"
        )
    _prepare(target_url)
    specs = _specs(16, f"threads_{uuid.uuid4().hex[:8]}", seed)
    barrier = threading.Barrier(len(specs))

    def attempt(spec: AttemptSpec) -> dict[str, Any]:
        barrier.wait(timeout=60)
        return run_attempt(target_url, store, spec)  # the fixture closes every thread's connection

    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        outcomes = list(pool.map(attempt, specs))
    _check_race(target_url, store, specs, outcomes)


@pytest.mark.slow
@pytest.mark.parametrize("target_url", ONE_WRITER_PROCESS_AT_A_TIME_EXCLUDED, indirect=True)
def test_process_race_keeps_only_the_newest_attempts_output(
    target_url: str, store: Store, store_url: str
) -> None:
    """8 spawned processes racing on one slot leave exactly the newest issued attempt's rows."""
    _prepare(target_url)
    store.migrate()
    specs = _specs(8, f"procs_{uuid.uuid4().hex[:8]}", seed=4)
    ctx = race_context()
    barrier = ctx.Barrier(len(specs))
    results = ctx.Queue()
    procs = start_children(
        ctx, run_attempt_in_child, [(target_url, store_url, spec, barrier, results) for spec in specs]
    )
    outcomes = [results.get(timeout=240) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    _check_race(target_url, store, specs, outcomes)
