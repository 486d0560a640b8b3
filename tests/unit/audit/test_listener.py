"""The listener module: registers with both listener managers, adapts real SDK objects, never raises."""

from __future__ import annotations

import itertools
import os
import signal
import uuid
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_crashsafe.audit import listener, replay_safe
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.store.attempts import merge_rows

pytestmark = pytest.mark.floor  # CI's floor subset (docs/packaging.md, "Version floor")

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Recorder:
    """A writer stand-in that keeps what it was given."""

    stop_timeout = 2.0

    def __init__(self) -> None:
        self.events: list[AttemptEvent] = []
        self.limits: list[float | None] = []
        self.closed = 0

    def submit(self, event: AttemptEvent, *, timeout: float | None = None) -> bool:
        self.events.append(event)
        self.limits.append(timeout)
        return True

    def close(self, timeout: float | None = None) -> bool:
        self.closed += 1
        return True

    def note_terminated(self) -> None:
        self.events.append(AttemptEvent("listener", "sigterm", "", -1, "", 0))


@pytest.fixture
def recorder() -> Any:
    """The listener's writer replaced by a recorder for one test."""
    rec = Recorder()
    listener.set_writer(rec)
    rec.pid = os.getpid()
    handler = signal.getsignal(signal.SIGTERM)
    yield rec
    listener.set_writer(None)
    signal.signal(signal.SIGTERM, handler)  # the running hook chains its own in front
    listener._sigterm_chained_in = None
    listener._running_ti = None


def runtime_ti(task: Any, try_number: int = 1) -> Any:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    dag_run = SimpleNamespace(run_id="manual__1", logical_date=START, clear_number=2)
    ti = RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(),
        task_id="load",
        dag_id="nightly",
        run_id="manual__1",
        try_number=try_number,
        map_index=-1,
        start_date=START,
        task=task,
        dag_version_id=uuid.uuid4(),
    )
    object.__setattr__(ti, "get_template_context", lambda: {"dag_run": dag_run})
    return ti


def test_module_registers_with_both_listener_managers() -> None:
    """The module's @hookimpl functions are accepted by the core and the Task SDK listener managers."""
    from airflow.listeners.listener import get_listener_manager as core_manager
    from airflow.sdk.listener import get_listener_manager as sdk_manager

    for manager in (core_manager(), sdk_manager()):
        manager.add_listener(listener)
        try:
            impls = manager.pm.hook.on_task_instance_running.get_hookimpls()
            assert listener.on_task_instance_running in [i.function for i in impls]
            assert manager.pm.is_registered(listener)
        finally:
            manager.pm.unregister(listener)


def test_worker_start_and_success_become_attempt_events(recorder: Recorder) -> None:
    """A real RuntimeTaskInstance yields start and end events keyed by try, host and pid."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    ti = runtime_ti(replay_safe(EmptyOperator(task_id="load")))
    listener.on_task_instance_running(previous_state=None, task_instance=ti)
    listener.on_task_instance_success(previous_state=None, task_instance=ti)
    start, end = recorder.events
    assert (start.source, start.try_number, start.started_at, start.clear_number) == ("listener", 1, START, 2)
    assert start.slot_partition == "2026-01-01T00:00:00+00:00"
    assert start.replay_safe is True
    assert start.operator
    assert start.operator.endswith("EmptyOperator")
    assert start.pid == end.pid > 0
    assert start.hostname == end.hostname != ""
    assert end.reported_state == "success"
    assert end.ended_at is not None


def test_the_start_records_whether_the_process_resumes_its_try(recorder: Recorder) -> None:
    """What Airflow hands the process (next_method, reschedule count) is recorded as ``resumed``."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk.api.datamodels._generated import TIRunContext

    def context(**fields: Any) -> Any:
        return TIRunContext.model_construct(**fields)

    cases = [
        (None, False),
        (context(next_method=None, task_reschedule_count=0), False),
        (context(next_method="resume_after_unit", task_reschedule_count=0), True),
        (context(next_method=None, task_reschedule_count=2), True),
    ]
    for given, expected in cases:
        ti = runtime_ti(EmptyOperator(task_id="load"))
        object.__setattr__(ti, "_ti_context_from_server", given)
        listener.on_task_instance_running(previous_state=None, task_instance=ti)
        assert recorder.events[-1].resumed is expected


def test_sigterm_reaches_the_writer_then_airflows_own_handler(recorder: Recorder) -> None:
    """The running hook chains a SIGTERM handler: the writer notes it, on_kill's handler still runs."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    airflow_handler: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: airflow_handler.append(signum))
    ti = runtime_ti(EmptyOperator(task_id="load"))
    listener.on_task_instance_running(previous_state=None, task_instance=ti)
    listener.on_task_instance_running(previous_state=None, task_instance=ti)  # chained once
    os.kill(os.getpid(), signal.SIGTERM)
    assert [e.dag_id for e in recorder.events] == ["nightly", "nightly", "sigterm"]
    assert airflow_handler == [signal.SIGTERM]


def test_a_deferred_task_process_records_its_stop(recorder: Recorder) -> None:
    """before_stopping after a deferral (no terminal hook) ends this process's part of the try."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk.api.datamodels._generated import TaskInstanceState

    ti = runtime_ti(EmptyOperator(task_id="load"), try_number=2)
    listener.on_task_instance_running(previous_state=None, task_instance=ti)
    ti.state = TaskInstanceState.SUCCESS
    listener.before_stopping(component=None)  # success has its own hook: nothing more here
    ti.state = TaskInstanceState.DEFERRED
    listener.before_stopping(component=None)
    start, stop = recorder.events
    assert (stop.try_number, stop.pid, stop.reported_state) == (2, start.pid, "deferred")
    assert stop.ended_at is not None


def test_the_stop_is_written_with_the_stop_limit_then_the_writer_closed(recorder: Recorder) -> None:
    """The suspension is the process's last word (os._exit follows): stop_timeout, then close()."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk.api.datamodels._generated import TaskInstanceState

    ti = runtime_ti(EmptyOperator(task_id="load"), try_number=2)
    listener.on_task_instance_running(previous_state=None, task_instance=ti)
    ti.state = TaskInstanceState.DEFERRED
    listener.before_stopping(component=None)
    assert recorder.limits == [None, Recorder.stop_timeout]
    assert recorder.closed == 1
    ti.state = TaskInstanceState.SUCCESS
    listener.before_stopping(component=None)  # a finished task's process closes its writer too
    assert (len(recorder.events), recorder.closed) == (2, 2)


def test_scheduler_failure_ignores_the_next_attempts_ti_id(recorder: Recorder) -> None:
    """The scheduler's failure hook carries the next try's id: the event takes host/pid, never the id."""
    orm_ti = SimpleNamespace(
        dag_id="nightly",
        task_id="load",
        run_id="manual__1",
        map_index=-1,
        try_number=1,
        id="NEXT-ATTEMPT-ID",
        hostname="w1",
        pid=4242,
        state="up_for_retry",
        start_date=START,
        end_date=START,
        dag_run=None,
    )
    listener.on_task_instance_failed(previous_state=None, task_instance=orm_ti, error=None)
    [event] = recorder.events
    assert (event.source, event.ti_id, event.hostname, event.pid, event.state) == (
        "scheduler",
        None,
        "w1",
        4242,
        "up_for_retry",
    )


def test_hooks_never_raise(recorder: Recorder) -> None:
    """A task instance the adapters cannot read, or a failing writer, never raises into the task."""
    listener.on_task_instance_running(previous_state=None, task_instance=object())
    listener.on_task_instance_failed(previous_state=None, task_instance=object(), error=None)

    class Broken:
        pid = __import__("os").getpid()

        def submit(self, event: AttemptEvent) -> bool:
            raise RuntimeError("boom")

    listener.set_writer(Broken())
    listener.on_task_instance_success(previous_state=None, task_instance=runtime_ti(None))
    listener._running_ti = (os.getpid(), runtime_ti(None))
    listener.before_stopping(component=None)  # no stop_timeout, no close: still nothing raised


def test_a_deferral_behind_a_slow_start_write_reaches_the_store_before_exit(
    recorder: Recorder, tmp_path: Path
) -> None:
    """The drill's lost stop: the start write outlasts its limit, the task defers, os._exit follows.

    The stop used to go straight to the spool (a write was in flight) and the write to a thread
    about to die; now it waits for that write, is stored, and nothing is left claimed or in flight.
    """
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk.api.datamodels._generated import TaskInstanceState

    from airflow_crashsafe.audit.spool import Spool
    from airflow_crashsafe.audit.writer import Writer
    from tests.unit.audit.sinks import MemorySink

    slow_store = MemorySink(delay=0.3)
    writer = Writer(slow_store, Spool(tmp_path), timeout=0.05, beacon_interval=3600, tick=0.01)
    listener.set_writer(writer)
    ti = runtime_ti(EmptyOperator(task_id="load"), try_number=2)
    listener.on_task_instance_running(previous_state=None, task_instance=ti)
    ti.state = TaskInstanceState.DEFERRED
    listener.before_stopping(component=None)
    assert [e.reported_state for e in slow_store.applied].count("deferred") == 1
    assert list(tmp_path.iterdir()) == []  # the start's spooled copy drained too, nothing claimed
    assert writer.close(timeout=0)  # before_stopping already let it finish


def test_merge_is_order_independent_and_idempotent() -> None:
    """Start, end, scheduler verdict and beacon converge to one row in any order, re-delivery included."""
    key = {
        "dag_id": "d",
        "task_id": "t",
        "map_index": -1,
        "run_id": "r",
        "try_number": 1,
        "hostname": "h",
        "pid": 7,
    }
    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=timezone.utc) for s in range(6)]
    evs = [
        AttemptEvent(
            source="listener", **key, slot_partition="p", ti_id="a", started_at=t[0], last_seen_at=t[0]
        ),
        AttemptEvent(source="listener", **key, ended_at=t[4], reported_state="success", last_seen_at=t[4]),
        AttemptEvent(source="scheduler", **key, started_at=t[1], ended_at=t[5], state="failed"),
        AttemptEvent(source="reconcile", **key, started_at=t[1], ended_at=t[3], state="failed"),
        AttemptEvent(source="listener", **key, last_seen_at=t[2]),
    ]
    results = set()
    for order in itertools.permutations(evs + evs[:1]):
        merged: dict[str, Any] = {}
        for e in order:
            merged = merge_rows(merged, e.as_row()) if merged else e.as_row()
        results.add(tuple(sorted((k, str(v)) for k, v in merged.items())))
    [final] = results
    final_d = dict(final)
    assert final_d["started_at"] == str(t[0])
    assert final_d["ended_at"] == str(t[4])
    assert final_d["end_source"] == "listener"
    assert final_d["state"] == "failed"
    assert final_d["reported_state"] == "success"
    assert final_d["ti_id"] == "a"
