"""Plain attempt events, adapted from Airflow's task-instance objects by pure functions.

Listeners see two kinds of task instance: the Task SDK's ``RuntimeTaskInstance`` in the task
process on a worker (the process that actually runs the code: its pid and host are the attempt's),
and the ORM ``TaskInstance`` in the scheduler and api-server. The latter carries, in scheduler-side
failure hooks, the NEXT attempt's ``id`` with the old ``try_number``, so its ``id`` is never used.
Events are keyed by ``(dag_id, task_id, map_index, run_id, try_number, hostname, pid)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from airflow_crashsafe.identity import slot_from_context, worker_hostname

__all__ = [
    "REPLAY_SAFE_ATTR",
    "SUSPENDED",
    "AttemptEvent",
    "Source",
    "ended",
    "from_server_ti",
    "is_worker_ti",
    "resumes_suspension",
    "seen",
    "started",
]

Source = Literal["listener", "scheduler", "reconcile"]
#: Operator attribute that declares a task replay-safe (see :func:`airflow_crashsafe.audit.replay_safe`).
REPLAY_SAFE_ATTR = "crashsafe_replay_safe"
_FINISHED = {"success", "failed", "skipped", "upstream_failed", "removed", "up_for_retry"}
#: A task process that stops in these states fires no terminal hook; the same try goes on in a
#: later process (after its trigger fired, or at the sensor's next poke): one execution, two pids.
SUSPENDED = ("deferred", "up_for_reschedule")


@dataclass(frozen=True)
class AttemptEvent:
    """What one hook (or one reconciled try) says about one execution of a slot."""

    source: Source
    dag_id: str
    task_id: str
    map_index: int
    run_id: str
    try_number: int
    hostname: str = ""  # "" / 0: the process is not known (a placeholder, merged later)
    pid: int = 0
    slot_partition: str = ""
    ti_id: str | None = None
    clear_number: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    state: str | None = None  # Airflow's verdict (scheduler, api-server, history)
    reported_state: str | None = None  # what the task process itself reported
    last_seen_at: datetime | None = None
    replay_safe: bool | None = None
    operator: str | None = None
    #: When the task process got SIGTERM (its supervisor stopping it: a stale attempt, mostly).
    terminated_at: datetime | None = None
    #: The process resumed its try after a deferral or a reschedule (Airflow handed it the method
    #: to resume, or the try's reschedules), rather than starting it: None where not recorded.
    resumed: bool | None = None

    def describe(self) -> str:
        return (
            f"{self.dag_id}.{self.task_id}[{self.map_index}] run {self.run_id} try {self.try_number} "
            f"({self.hostname or '?'} pid {self.pid or '?'}, {self.source})"
        )

    def as_row(self) -> dict[str, Any]:
        """This event as a row of ``crashsafe_attempts``: what it saw, and its source beside each
        start, end and state it names (see :mod:`airflow_crashsafe.store.attempts`)."""
        row = asdict(self)
        source = row.pop("source")
        row["start_source"] = source if self.started_at is not None else None
        row["end_source"] = source if self.ended_at is not None else None
        row["state_source"] = source if self.state is not None else None
        return row

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (for the local spool)."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, datetime):
                data[key] = value.isoformat()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttemptEvent:
        values = dict(data)
        for key in ("started_at", "ended_at", "last_seen_at", "terminated_at"):
            if values.get(key):
                values[key] = datetime.fromisoformat(str(values[key]))
        return cls(**values)


def _utc(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _state(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _worker_hostname() -> str:
    """The hostname Airflow records for this worker (``[core] hostname_callable``)."""
    return worker_hostname()


def is_worker_ti(ti: Any) -> bool:
    """True for the Task SDK's runtime task instance (the task process itself)."""
    return type(ti).__module__.startswith("airflow.sdk")


def _common(ti: Any) -> dict[str, Any]:
    map_index = getattr(ti, "map_index", -1)
    return {
        "dag_id": str(ti.dag_id),
        "task_id": str(ti.task_id),
        "map_index": -1 if map_index is None else int(map_index),
        "run_id": str(ti.run_id),
        "try_number": int(ti.try_number),
    }


def _worker_dag_run(ti: Any) -> Any:
    try:
        return ti.get_template_context()["dag_run"]
    except Exception:
        return None


def _partition(ti: Any, dag_run: Any) -> str:
    if dag_run is None:
        return ""
    return slot_from_context({"ti": ti, "dag_run": dag_run}).partition


def _declared_replay_safe(task: Any) -> bool | None:
    if task is None:
        return None
    return bool(getattr(task, REPLAY_SAFE_ATTR, False))


def _operator_path(task: Any) -> str | None:
    if task is None:
        return None
    cls = type(task)
    return f"{cls.__module__}.{cls.__qualname__}"


def _this_process(ti: Any, dag_run: Any, **seen: Any) -> AttemptEvent:
    """What the calling task process itself (its host and pid) saw of its attempt."""
    return AttemptEvent(
        source="listener",
        **_common(ti),
        hostname=_worker_hostname(),
        pid=os.getpid(),
        slot_partition=_partition(ti, dag_run),
        ti_id=str(ti.id),
        **seen,
    )


def resumes_suspension(ti: Any) -> bool:
    """The task process resumes its try: it got the method to resume from a deferral, or the try
    was rescheduled before (a sensor's later poke). What Airflow sent it at start
    (``TIRunContext.next_method`` / ``task_reschedule_count``), which the task runner also reads."""
    context = getattr(ti, "_ti_context_from_server", None)
    if context is None:
        return False
    return (
        bool(getattr(context, "next_method", None))
        or int(getattr(context, "task_reschedule_count", 0) or 0) > 0
    )


def started(ti: Any, *, now: datetime | None = None) -> AttemptEvent:
    """The start of the calling process's attempt (``on_task_instance_running`` on a worker)."""
    dag_run = _worker_dag_run(ti)
    task = getattr(ti, "task", None)
    at = _utc(getattr(ti, "start_date", None)) or now or datetime.now(timezone.utc)
    return _this_process(
        ti,
        dag_run,
        clear_number=int(getattr(dag_run, "clear_number", 0) or 0) if dag_run is not None else None,
        started_at=at,
        last_seen_at=at,
        replay_safe=_declared_replay_safe(task),
        operator=_operator_path(task),
        resumed=resumes_suspension(ti),
    )


def ended(ti: Any, state: str, *, now: datetime | None = None) -> AttemptEvent:
    """The end the calling task process reports (worker-side terminal hooks, in ``finalize()``)."""
    at = _utc(getattr(ti, "end_date", None)) or now or datetime.now(timezone.utc)
    return _this_process(ti, _worker_dag_run(ti), ended_at=at, reported_state=state, last_seen_at=at)


#: What names an execution, and the slot it belongs to: all a beacon carries over from its start.
_EXECUTION = ("dag_id", "task_id", "map_index", "run_id", "try_number", "hostname", "pid", "slot_partition")


def seen(key: AttemptEvent, *, now: datetime | None = None, terminated: bool = False) -> AttemptEvent:
    """A liveness beacon for a running attempt: it was alive at ``now`` (and got SIGTERM then)."""
    at = now or datetime.now(timezone.utc)
    return AttemptEvent(
        source="listener",
        **{name: getattr(key, name) for name in _EXECUTION},
        last_seen_at=at,
        terminated_at=at if terminated else None,
    )


def from_server_ti(ti: Any, state: str | None, *, now: datetime | None = None) -> AttemptEvent:
    """Airflow's verdict on an attempt, from an ORM task instance (scheduler or api-server).

    ``ti.id`` is ignored (it may already be the next attempt's); ``hostname``/``pid`` are the ones
    the task process registered, so the event lands on that process's row.
    """
    dag_run = None
    try:
        dag_run = getattr(ti, "dag_run", None)
    except Exception:  # a detached instance cannot lazy-load; the partition is filled later
        dag_run = None
    verdict = state or _state(getattr(ti, "state", None))
    end = _utc(getattr(ti, "end_date", None)) or now or datetime.now(timezone.utc)
    pid = getattr(ti, "pid", None)
    return AttemptEvent(
        source="scheduler",
        **_common(ti),
        hostname=str(getattr(ti, "hostname", None) or ""),
        pid=int(pid or 0),
        slot_partition=_partition(ti, dag_run),
        started_at=_utc(getattr(ti, "start_date", None)),
        ended_at=end if verdict in _FINISHED else None,
        state=verdict,
    )
