"""The scan's worker pool: a job that ends, kills or hangs its process is reported, and the rest run on."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from airflow_crashsafe.scan.isolation import Outcome, WorkerPool


def _handler(job: str, phase: Callable[[str], None]) -> Any:
    """A stand-in for importing a file: each job name says what the "file" does."""
    phase("importing")
    if job == "exit":
        os._exit(0)
    if job == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if job == "hang":
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(3600)
    if job == "print":
        print("not the report")
        os.write(1, b"nor this\n")
    if job == "raise":
        raise ValueError("a bug in the handler")
    if job == "slow_phases":
        for _ in range(3):
            time.sleep(1.5)
            phase("judging")
    return (job, os.getpid())


def _run(jobs: list[str], *, size: int = 2, timeout: float = 1.0) -> dict[str, Outcome]:
    with WorkerPool(_handler, size=size, timeout=timeout) as pool:
        for job in jobs:
            pool.submit(job, job)
        return {o.key: o for o in pool.outcomes()}


def test_abnormal_ends_are_outcomes_and_the_rest_still_run() -> None:
    """os._exit, SIGKILL and a hang each end as that job's outcome; the good jobs around them finish."""
    started = time.monotonic()
    out = _run(["ok1", "exit", "ok2", "kill", "hang", "ok3"], timeout=1.0)
    assert time.monotonic() - started < 30
    assert {k for k, o in out.items() if o.status == "done"} == {"ok1", "ok2", "ok3"}
    assert out["exit"].status == "crashed"
    assert "exited with code 0" in out["exit"].error
    assert "while importing" in out["exit"].error
    assert out["kill"].status == "crashed"
    assert "SIGKILL (signal 9)" in out["kill"].error
    assert out["hang"].status == "timed_out"
    assert "took longer than 1 s (--timeout)" in out["hang"].error


def test_workers_are_reused_and_a_dead_one_is_replaced() -> None:
    """One worker takes job after job; after it dies, a fresh one (a new pid) takes the next."""
    out = _run(["a", "b", "exit", "c"], size=1)
    assert out["a"].result[1] == out["b"].result[1]
    assert out["c"].result[1] != out["a"].result[1]


def test_each_phase_gets_the_time_limit_again() -> None:
    """Phases of 1.5 s each under a 0.5 s limit (+2 s grace): the job runs 4.5 s and is not stopped."""
    out = _run(["slow_phases"], size=1, timeout=0.5)
    assert out["slow_phases"].status == "done"
    assert out["slow_phases"].phase == "judging"


def test_a_failing_handler_is_reported_not_lost(capfd: Any) -> None:
    """An exception in the handler is the job's outcome with its traceback; printing reaches stderr only."""
    out = _run(["raise", "print"], size=1)
    assert out["raise"].status == "crashed"
    assert "ValueError: a bug in the handler" in out["raise"].error
    assert out["print"].status == "done"
    captured = capfd.readouterr()
    assert "not the report" not in captured.out
    assert "nor this" not in captured.out
    assert "not the report" in captured.err
    assert "nor this" in captured.err


def test_jobs_submitted_while_running_are_run() -> None:
    """A job added from an outcome (the static read after a crash) runs in the same pool."""
    seen = []
    with WorkerPool(_handler, size=1, timeout=1.0) as pool:
        pool.submit("exit", "exit")
        for outcome in pool.outcomes():
            seen.append((outcome.key, outcome.status))
            if outcome.key == "exit":
                pool.submit("after", "after")
    assert seen == [("exit", "crashed"), ("after", "done")]
