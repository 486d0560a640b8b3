"""Adopt, don't redo, against a real PostgreSQL 15: units that outlive their sender.

Each load's source calls ``counted_work(seconds)``, which bumps a sequence (sequences are not
transactional, so a rolled-back execution still counts) and sleeps: the test counts executions
server-side. A "reset re-run" is the same task with ``try_number=2`` started while try 1's unit
is still running; the triggerer's part is played by running :class:`UnitEndTrigger` in-process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.operators import PartitionOverwriteOperator
from airflow_crashsafe.testing.context import fake_context
from airflow_crashsafe.testing.metrics import record_metrics
from airflow_crashsafe.triggers.unit import UnitEndTrigger
from tests.support.adoption import (
    DAY,
    executions,
    in_thread,
    overwrite_op,
    setup,
    source,
    wait_running,
)
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _defers(op: PartitionOverwriteOperator, context: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert deferred.value.method_name == "resume_after_unit"
    assert isinstance(deferred.value.trigger, UnitEndTrigger)
    return deferred.value


def _fire(deferred: TaskDeferred) -> dict[str, Any]:
    """Run the trigger (as the triggerer would) until its first event; its payload."""
    classpath, kwargs = deferred.trigger.serialize()
    assert classpath == "airflow_crashsafe.triggers.unit.UnitEndTrigger"
    trigger = UnitEndTrigger(**{**kwargs, "poll_interval": 0.1})

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first())


def _resume(
    op: PartitionOverwriteOperator, context: dict[str, Any], deferred: TaskDeferred
) -> dict[str, Any]:
    event = _fire(deferred)
    return dict(
        op.resume_execution(deferred.method_name, {**(deferred.kwargs or {}), "event": event}, context)
    )


def test_a_reset_rerun_adopts_the_in_flight_unit_and_runs_nothing(pg_target: SqlTarget) -> None:
    """Try 2 defers while try 1's unit runs, adopts (and counts) its commit: one execution, exact rows."""
    setup(pg_target)
    first = overwrite_op(pg_target, 2.0)
    thread, outcome = in_thread(first, fake_context(task_id="load_revenue", try_number=1, ti_id="ti-1"))
    wait_running(pg_target.url)
    rerun = overwrite_op(pg_target, 2.0)
    context = fake_context(task_id="load_revenue", try_number=2, ti_id="ti-2")
    deferred = _defers(rerun, context)
    assert deferred.kwargs
    assert deferred.kwargs["awaited"]["ti_id"] == "ti-1"
    with record_metrics() as sent:
        result = _resume(rerun, context, deferred)
    thread.join(10)
    assert outcome.get("result", {}).get("rows") == 2, outcome
    assert result["adopted"] is True
    assert sent.count("crashsafe.fence.adopted", task_id="load_revenue") == 1
    assert result["rows"] == 2  # the adopted unit's own result
    assert "try 1 (ti ti-1" in result["committed_by"]
    assert executions(pg_target) == 1
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == [(DAY, "eu", 10), (DAY, "us", 10)]
    assert pg_target.committed_try("revenue") == 1


def test_a_unit_whose_sender_is_sigkilled_commits_and_is_adopted(pg_target: SqlTarget) -> None:
    """The attempt's process dies mid-unit (SIGKILL, as Airflow does 5 s after SIGTERM): the unit commits."""
    setup(pg_target)
    script = textwrap.dedent(
        f"""
        from airflow_crashsafe.operators import PartitionOverwriteOperator
        from airflow_crashsafe.testing.context import fake_context
        op = PartitionOverwriteOperator(task_id="load_revenue", conn_id={pg_target.conn_id!r},
            target_table="revenue", partition={{"day": {DAY!r}}}, sql={source(3.0)!r})
        op.execute(fake_context(task_id="load_revenue", try_number=1, ti_id="ti-killed"))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        wait_running(pg_target.url, timeout=60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
    rerun = overwrite_op(pg_target, 3.0)
    context = fake_context(task_id="load_revenue", try_number=2, ti_id="ti-2")
    deferred = _defers(rerun, context)
    result = _resume(rerun, context, deferred)
    assert result["adopted"] is True
    assert "ti-killed" in result["committed_by"]
    assert executions(pg_target) == 1
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == [(DAY, "eu", 10), (DAY, "us", 10)]


def test_when_the_adopted_unit_fails_the_rerun_does_the_work_itself(pg_target: SqlTarget) -> None:
    """Try 1's unit is cancelled midway: try 2, woken by the trigger, runs the load itself; rows exact."""
    setup(pg_target)
    first = overwrite_op(pg_target, 30.0)
    thread, outcome = in_thread(first, fake_context(task_id="load_revenue", try_number=1))
    pid = wait_running(pg_target.url)
    rerun = overwrite_op(pg_target, 0.1)
    context = fake_context(task_id="load_revenue", try_number=2, ti_id="ti-2")
    deferred = _defers(rerun, context)
    with psycopg.connect(pg_target.url, autocommit=True) as conn:
        conn.execute("SELECT pg_cancel_backend(%s)", (pid,))
    result = _resume(rerun, context, deferred)
    thread.join(10)
    assert isinstance(outcome.get("error"), psycopg.errors.QueryCanceled), outcome
    assert result["skipped"] is False
    assert not result.get("adopted")
    assert result["rows"] == 2
    assert executions(pg_target) == 2
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == [(DAY, "eu", 10), (DAY, "us", 10)]
    assert pg_target.committed_try("revenue") == 2


def test_a_unit_hanging_past_the_adoption_timeout_is_cancelled_and_redone_once(pg_target: SqlTarget) -> None:
    """Past adoption_timeout try 2 takes over: try 1's unit is cancelled (FencedOut), the work runs again."""
    setup(pg_target)
    first = overwrite_op(pg_target, 60.0)
    thread, outcome = in_thread(first, fake_context(task_id="load_revenue", try_number=1))
    wait_running(pg_target.url)
    rerun = overwrite_op(pg_target, 0.1, adoption_timeout=1.0)
    context = fake_context(task_id="load_revenue", try_number=2, ti_id="ti-2")
    deferred = _defers(rerun, context)
    started = time.monotonic()
    assert _fire(deferred) == {"status": "timeout"}
    result = _resume(rerun, context, deferred)
    assert time.monotonic() - started < 20
    thread.join(10)
    assert not thread.is_alive()
    assert isinstance(outcome.get("error"), FencedOut), outcome
    assert result["skipped"] is False
    assert result["rows"] == 2
    assert executions(pg_target) == 2
    assert pg_target.rows("SELECT day, region, amount FROM revenue") == [(DAY, "eu", 10), (DAY, "us", 10)]
    assert pg_target.committed_try("revenue") == 2


def test_on_kill_leaves_the_unit_running_and_it_commits(pg_target: SqlTarget) -> None:
    """on_kill (Airflow's SIGTERM to a reset attempt) no longer throws the work away by default."""
    setup(pg_target)
    op = overwrite_op(pg_target, 1.5)
    thread, outcome = in_thread(op, fake_context(task_id="load_revenue", try_number=1))
    wait_running(pg_target.url)
    op.on_kill()
    thread.join(15)
    assert outcome.get("result", {}).get("rows") == 2, outcome
    assert pg_target.committed_try("revenue") == 1
    assert executions(pg_target) == 1


def test_without_adoption_a_rerun_fences_out_and_cancels_the_stale_unit(pg_target: SqlTarget) -> None:
    """adopt_in_flight=False: try 2 runs at once, try 1's unit is cancelled as stale; rows exact."""
    setup(pg_target)
    first = overwrite_op(pg_target, 60.0)
    thread, outcome = in_thread(first, fake_context(task_id="load_revenue", try_number=1))
    wait_running(pg_target.url)
    result = overwrite_op(pg_target, 0.1, adopt_in_flight=False).execute(
        fake_context(task_id="load_revenue", try_number=2)
    )
    thread.join(10)
    assert isinstance(outcome.get("error"), FencedOut), outcome
    assert result["rows"] == 2
    assert not result.get("adopted")
    assert pg_target.committed_try("revenue") == 2
