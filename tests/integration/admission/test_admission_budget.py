"""Recovery admission against a real store: the budget holds, dead holders free places, order is kept.

Re-runs are plain task contexts with ``try_number=2`` and no audit record of try 1 (a recovery
re-run); ``recovery_admission`` is what effect(), fenced_transaction and TaskFlow code use.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.admission import recovery_admission
from airflow_crashsafe.admission.lease import poll, release, take
from airflow_crashsafe.store import admission as sql
from airflow_crashsafe.store.admission import NO_DEADLINE, Request
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing.context import fake_context

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def store(configured_store: Store) -> Store:
    """The configured crashsafe store, on PostgreSQL and on the embedded SQLite file."""
    return configured_store


def _rerun(task_id: str) -> dict[str, Any]:
    return fake_context(task_id=task_id, try_number=2)


@contextlib.contextmanager
def full_budget(store: Store, resource: str) -> Iterator[float]:
    """A re-run holds ``resource``'s only place for 0.8 s; yields when it took it (monotonic)."""
    holder = recovery_admission(resource, context=_rerun("holder"), concurrency=1, store=store)
    holder.__enter__()
    timer = threading.Timer(0.8, holder.__exit__, args=(None, None, None))
    timer.start()
    try:
        yield time.monotonic()
    finally:
        timer.join()


def test_n_reruns_with_budget_k_never_run_more_than_k_at_once(store: Store) -> None:
    """Eight re-runs with budget 3: the store never shows more than 3 live holders, and all finish."""
    k, seen, done, errors = 3, [], [], []
    lock = threading.Lock()

    def rerun(i: int) -> None:
        try:
            with recovery_admission(
                "warehouse", context=_rerun(f"load_{i}"), concurrency=k, store=store
            ) as lease:
                assert lease is not None
                for _ in range(3):
                    with store.transaction() as db:
                        count = sql.live_holders(db, "warehouse")
                    with lock:
                        seen.append(count)
                    time.sleep(0.1)
            with lock:
                done.append(i)
        except BaseException as exc:  # the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=rerun, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert sorted(done) == list(range(8))
    assert max(seen) <= k
    assert max(seen) == k  # the budget was used, not just respected
    with store.transaction() as db:
        assert sql.rows(db, "warehouse") == []


def test_first_try_is_never_delayed(store: Store) -> None:
    """With the budget full, a try 1 runs at once and holds no place."""
    with recovery_admission("warehouse", context=_rerun("holder"), concurrency=1, store=store) as lease:
        assert lease is not None
        started = time.monotonic()
        with recovery_admission(
            "warehouse", context=fake_context(task_id="first"), concurrency=1, store=store
        ) as first:
            assert first is None
        assert time.monotonic() - started < 1.0


def test_rerun_waits_for_a_full_budget_and_records_the_wait(store: Store) -> None:
    """A re-run behind a full budget is admitted once the holder releases; admission_waited is recorded."""
    with (
        full_budget(store, "warehouse") as started,
        recovery_admission("warehouse", context=_rerun("waiter"), concurrency=1, store=store) as lease,
    ):
        assert lease is not None
        assert lease.place == 1
        assert time.monotonic() - started >= 0.7
    events = store.events(kinds=[sql.WAITED_EVENT])
    assert [e["task_id"] for e in events] == ["waiter"]
    assert events[0]["detail"]["waited_seconds"] >= 0.7
    assert events[0]["target"] == "warehouse"


def test_effect_rerun_waits_for_its_targets_budget(store: Store) -> None:
    """effect() in a recovery re-run waits for a place of its target; its block runs once admitted."""
    from airflow_crashsafe.effects import effect

    with (
        full_budget(store, "sms-gateway") as started,
        effect("sms-gateway", context=_rerun("sender"), recovery_concurrency=1, store=store) as fx,
    ):
        assert fx.pending
        assert time.monotonic() - started >= 0.7
        fx.done("sent")
    assert [e["task_id"] for e in store.events(kinds=[sql.WAITED_EVENT])] == ["sender"]


def test_fenced_transaction_rerun_waits_for_its_connections_budget(store: Store, sqlite_url: str) -> None:
    """fenced_transaction in a recovery re-run waits for a place of its connection before it writes."""
    from airflow_crashsafe.fencing import fenced_transaction
    from airflow_crashsafe.store.dbapi import connect_url

    db = connect_url(sqlite_url)
    try:
        db.execute("CREATE TABLE out (v INTEGER)")
        with (
            full_budget(store, "warehouse_conn") as started,
            fenced_transaction(
                "warehouse_conn", "out", context=_rerun("load"), db=db, store=store, recovery_concurrency=1
            ) as tx,
        ):
            assert time.monotonic() - started >= 0.7
            tx.cursor.execute("INSERT INTO out VALUES (1)")
    finally:
        db.close()
    assert [e["task_id"] for e in store.events(kinds=[sql.WAITED_EVENT])] == ["load"]


def _request(name: str, *, deadline: float = NO_DEADLINE, downstream: int = 0) -> Request:
    return Request(
        resource="warehouse",
        deadline_at=deadline,
        downstream=downstream,
        lease_seconds=60,
        dag_id="d",
        task_id=name,
        map_index=-1,
        run_id="r",
        try_number=2,
    )


def test_waiters_are_admitted_by_deadline_then_downstream_then_arrival(store: Store) -> None:
    """Smaller slack first; equal deadlines by more downstream tasks; then by arrival."""
    me, pid = "this-host", os.getpid()
    first = take(store, _request("holder"), 1, hostname=me, pid=pid)
    assert first.place == 1
    now = time.time()
    waiters = {
        "no_deadline": _request("no_deadline"),
        "late": _request("late", deadline=now + 3600),
        "late_many_downstream": _request("late_many_downstream", deadline=now + 3600, downstream=5),
        "soon": _request("soon", deadline=now + 1800),
        "no_deadline_second": _request("no_deadline_second"),
    }
    tickets = {name: take(store, request, 1, hostname=me, pid=pid) for name, request in waiters.items()}
    assert all(t.place is None for t in tickets.values())
    order, holding = [], first.holder
    while tickets:
        release(store, holding)
        admitted = [
            name
            for name, t in tickets.items()
            if poll(store, t.holder, "warehouse", 1, hostname=me, pid=pid) is not None
        ]
        assert len(admitted) == 1
        order.append(admitted[0])
        holding = tickets.pop(admitted[0]).holder
    assert order == ["soon", "late_many_downstream", "late", "no_deadline", "no_deadline_second"]


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from airflow_crashsafe.admission import recovery_admission
    from airflow_crashsafe.store.store import open_store
    from airflow_crashsafe.testing.context import fake_context

    store = open_store()
    with recovery_admission("warehouse", context=fake_context(task_id="doomed", try_number=2),
                            concurrency=1, store=store) as lease:
        assert lease is not None
        print("HOLDING", lease.holder, flush=True)
        time.sleep(600)
    """
)


def _killed_holder(env: dict[str, str]) -> int:
    """Start a process that takes the only place, SIGKILL it once it holds it; the row id."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    while not (lines and lines[-1].startswith("HOLDING")):
        line = proc.stdout.readline()
        assert line, "".join(lines)  # the holder exited before holding its place
        lines.append(line)
    line = lines[-1]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    return int(line.split()[1])


def test_a_killed_holders_place_is_freed_on_its_host(store: Store) -> None:
    """SIGKILL the holder of the only place: the next re-run on this host is admitted at its first poll."""
    _killed_holder({})
    started = time.monotonic()
    with recovery_admission(
        "warehouse", context=_rerun("next"), concurrency=1, store=store, max_wait=30
    ) as lease:
        assert lease is not None
    assert time.monotonic() - started < 2.0


def test_a_killed_holder_on_another_host_is_freed_after_its_lease(store: Store) -> None:
    """A holder of another host is judged by its beacon alone: its place frees once the lease runs out."""
    holder = _killed_holder({"AIRFLOW__CRASHSAFE__RECOVERY_LEASE_SECONDS": "2"})
    with store.transaction() as db:  # as if it had run elsewhere: its pid means nothing here
        db.execute("UPDATE crashsafe_admission SET hostname = 'elsewhere' WHERE id = %(id)s", {"id": holder})
    started = time.monotonic()
    with recovery_admission(
        "warehouse", context=_rerun("next"), concurrency=1, store=store, max_wait=30
    ) as lease:
        assert lease is not None
    waited = time.monotonic() - started
    assert 0.5 < waited < 2 + 6  # the lease bound, plus at most one jittered poll
