"""Whether a new attempt awaits an older holder of its key: alive on this host, fresh elsewhere."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_crashsafe.effects.in_flight import InFlightWait, pid_running
from airflow_crashsafe.identity import Attempt
from airflow_crashsafe.store.ledger import LedgerEntry

ME = Attempt(try_number=2, ti_id="ti-new", run_id="run", clear_number=0)
HOLDER = LedgerEntry(
    idem_key="k",
    dag_id="d",
    task_id="t",
    map_index=-1,
    slot_partition="p",
    target="x",
    version=1,
    fingerprint="f",
    request={},
    state="intent",
    send_count=1,
    replay_count=0,
    run_id="run",
    try_number=1,
    ti_id="ti-old",
    hostname=ME.hostname,
    pid=os.getpid(),
    token=1,
    response_status=None,
    result=None,
    error=None,
    intent_at="2026-11-29 00:00:00+00",
    outcome_at=None,
)


def waiter(budget: float = 30.0, lease: float = 10.0) -> InFlightWait:
    return InFlightWait(store=None, key="k", attempt=ME, budget=budget, lease=lease)  # type: ignore[arg-type]


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that ran on this host and is gone (exited and reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_live_holder_on_this_host_is_awaited() -> None:
    """Another attempt's intent whose process still runs here is awaited."""
    assert waiter().should_wait(HOLDER, age=1000.0)


def test_dead_holder_on_this_host_is_not_awaited(dead_pid: int) -> None:
    """A holder whose process is gone cannot record anything: no wait, however fresh its intent."""
    assert not waiter().should_wait(dataclasses.replace(HOLDER, pid=dead_pid), age=0.0)


def test_holder_on_another_host_is_awaited_only_within_its_lease() -> None:
    """Elsewhere, a holder counts as alive until its last sign of life is older than the lease."""
    remote = dataclasses.replace(HOLDER, hostname="other-worker", pid=1)
    assert waiter(lease=10.0).should_wait(remote, age=9.0)
    assert not waiter(lease=10.0).should_wait(remote, age=11.0)


def test_only_an_intent_is_awaited() -> None:
    """A recorded outcome (or an unknown one) is decided at once, never awaited."""
    for state in ("succeeded", "failed", "unknown", "conflict"):
        assert not waiter().should_wait(dataclasses.replace(HOLDER, state=state), age=0.0)


def test_own_leftover_intent_is_not_awaited() -> None:
    """An intent this very attempt left (its outcome could not be recorded) is not waited on."""
    mine = dataclasses.replace(HOLDER, try_number=ME.try_number, ti_id=ME.ti_id, pid=ME.pid)
    assert not waiter().should_wait(mine, age=0.0)


def test_no_budget_means_no_wait() -> None:
    """in_flight_wait=0 restores the old behaviour: the outcome is unknown at once."""
    assert not waiter(budget=0.0).should_wait(HOLDER, age=0.0)


def test_pid_running_sees_a_killed_unreaped_child_as_dead() -> None:
    """A SIGKILLed child that nobody reaped yet (a zombie) is not running."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_running(child.pid)
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(200):  # wait until the kernel made it a zombie, without reaping it
            with open(f"/proc/{child.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        assert not pid_running(child.pid)
    finally:
        child.kill()
        child.wait()
