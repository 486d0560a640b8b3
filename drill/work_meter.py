"""Warehouse work measured server-side: which task ran ``long_work()``, how often and for how long.

Airflow's view of a reset task (attempt start and end) misses the work that costs: the statement an
abandoned attempt sent keeps running inside PostgreSQL and commits after its client is gone. So the
drill measures where the work happens. The example DAGs' ``long_work()`` names its backend
``crashsafe-work:<dag_id>/<task_id>`` (``application_name``, local to its transaction); the
:class:`WorkMeter` samples ``pg_stat_activity`` on its own thread and connection, and
:func:`summarize` turns what it saw into needed and redone seconds per task and per DAG.

One *execution* is one labelled transaction of one backend, keyed by ``(pid, xact_start)``: a
crashsafe write runs several statements in the transaction that calls ``long_work()`` and the label
stays until it ends, so keying by statement would count one unit several times. Its seconds run
from the ``query_start`` of the first statement seen labelled to the last sample that saw it, both
on the server's clock. The resolution is the sampling interval: an execution may end up to one
interval after its last sample, and one seen in a single sample still counts, with the seconds it
had run by then.

The meter's role must own the labelled backends or hold ``pg_read_all_stats`` (PostgreSQL hides
other roles' ``state`` and times); such hidden backends are counted, not measured. PostgreSQL cuts
``application_name`` at 63 bytes, so a label (``dag_id/task_id``) must fit in
:data:`MAX_LABEL_BYTES`. Neither id may contain ``/``, which makes the split unambiguous.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "LABEL_PREFIX",
    "MAX_LABEL_BYTES",
    "METER_APPLICATION_NAME",
    "SAMPLE_SQL",
    "Coverage",
    "DagWork",
    "Execution",
    "LabelWork",
    "MeterResult",
    "Tally",
    "TaskWork",
    "WorkMeter",
    "summarize",
]

LABEL_PREFIX = "crashsafe-work:"
#: PostgreSQL keeps NAMEDATALEN - 1 = 63 bytes of ``application_name``; the prefix takes 15.
MAX_LABEL_BYTES = 63 - len(LABEL_PREFIX)
#: The meter's own connection: deliberately not under LABEL_PREFIX, so it never measures itself.
METER_APPLICATION_NAME = "crashsafe-work-meter"

#: One sample: labelled backends with the server's clock; epoch seconds as float8 for plain rows.
SAMPLE_SQL = """
SELECT pid, application_name, state,
       extract(epoch FROM xact_start)::float8,
       extract(epoch FROM query_start)::float8,
       extract(epoch FROM clock_timestamp())::float8
FROM pg_stat_activity
WHERE starts_with(application_name, %s) AND (state = 'active' OR state IS NULL)
"""

#: (pid, application_name, state, xact_start, query_start, sampled_at), times in epoch seconds.
SampleRow = tuple[int, str, str | None, float | None, float | None, float]


@dataclass
class Execution:
    """One labelled transaction of one backend, as the samples saw it (epoch seconds, server clock)."""

    label: str
    pid: int
    started: float
    last_seen: float
    samples: int = 1

    @property
    def seconds(self) -> float:
        return max(0.0, self.last_seen - self.started)


@dataclass
class LabelWork:
    """Every execution seen under one label, oldest first."""

    label: str
    executions: list[Execution]

    @property
    def count(self) -> int:
        return len(self.executions)

    @property
    def seconds(self) -> list[float]:
        return [e.seconds for e in self.executions]

    @property
    def total(self) -> float:
        return sum(self.seconds)


@dataclass
class Coverage:
    """How well the meter could see: a failed or hidden sample is work it may have missed."""

    interval: float
    samples: int = 0
    failed_samples: int = 0
    #: Sightings (sample rows) of labelled backends whose state and times its role may not read.
    hidden: int = 0
    last_error: str | None = None


@dataclass
class MeterResult:
    """What a :class:`WorkMeter` saw, per label, and how well it could see."""

    labels: dict[str, LabelWork]
    coverage: Coverage


class Tally:
    """Folds sample rows into executions; pure, so the bookkeeping is tested without a database."""

    def __init__(self) -> None:
        self._executions: dict[tuple[int, float, str], Execution] = {}
        self.hidden = 0

    def add(self, rows: Iterable[SampleRow]) -> None:
        """Record one sample's rows (see :data:`SAMPLE_SQL` for their shape)."""
        for pid, name, state, xact_start, query_start, sampled_at in rows:
            if state is None:
                self.hidden += 1
                continue
            label = name[len(LABEL_PREFIX) :] if name.startswith(LABEL_PREFIX) else name
            began = query_start if query_start is not None else sampled_at
            unit = xact_start if xact_start is not None else began
            key = (pid, unit, label)
            seen = self._executions.get(key)
            if seen is None:
                self._executions[key] = Execution(label, pid, began, sampled_at)
                continue
            seen.started = min(seen.started, began)
            seen.last_seen = max(seen.last_seen, sampled_at)
            seen.samples += 1

    def by_label(self) -> dict[str, LabelWork]:
        """Executions grouped by label, each group oldest first."""
        grouped: dict[str, list[Execution]] = {}
        for execution in sorted(self._executions.values(), key=lambda e: (e.started, e.pid)):
            grouped.setdefault(execution.label, []).append(replace(execution))  # a copy: the meter runs on
        return {label: LabelWork(label, found) for label, found in sorted(grouped.items())}


class WorkMeter:
    """Samples ``pg_stat_activity`` every ``interval`` seconds on its own thread and connection.

    It must never take the drill down: it connects on its thread (an unreachable warehouse only
    counts failed samples), reconnects after any error, and :meth:`stop` returns what was seen
    even when the thread is stuck. Use as a context manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(self, url: str, *, interval: float = 0.25, timeout: float = 5.0) -> None:
        self.url = url
        self.interval = interval
        self.timeout = timeout
        self._tally = Tally()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples = 0
        self._failed = 0
        self._last_error: str | None = None

    def start(self) -> WorkMeter:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="crashsafe-work-meter", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> MeterResult:
        """Stop sampling and return everything seen; never raises."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                with self._lock:
                    self._last_error = f"sampler still busy {timeout:g} s after stop; result as seen"
        return self.snapshot()

    def snapshot(self) -> MeterResult:
        """What was seen so far (the meter keeps running)."""
        with self._lock:
            seen = Coverage(self.interval, self._samples, self._failed, self._tally.hidden, self._last_error)
            return MeterResult(self._tally.by_label(), seen)

    def __enter__(self) -> WorkMeter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=max(1, round(self.timeout)),
            application_name=METER_APPLICATION_NAME,
            options=f"-c statement_timeout={int(self.timeout * 1000)}",
        )

    def _run(self) -> None:
        conn: Any = None
        try:
            while not self._stopping.is_set():
                began = time.monotonic()
                try:
                    if conn is None:
                        conn = self._connect()
                    rows = conn.execute(SAMPLE_SQL, (LABEL_PREFIX,)).fetchall()
                except Exception as exc:  # any failure is one failed sample, never the drill's end
                    with self._lock:
                        self._failed += 1
                        self._last_error = f"{type(exc).__name__}: {exc}".strip()
                    _close(conn)
                    conn = None
                else:
                    with self._lock:
                        self._tally.add(rows)
                        self._samples += 1
                self._stopping.wait(max(0.0, self.interval - (time.monotonic() - began)))
        finally:
            _close(conn)


def _close(conn: Any) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


@dataclass
class TaskWork:
    """One task's executions in the warehouse.

    ``needed`` is the longest single execution: the one that did the whole job (in the drill, the
    first attempt's statement, which runs on after the reset and commits). Every other execution
    is ``redone``. ``adopted`` is the work a re-run took over instead of redoing: executions in
    flight when the re-run started, counted only when the re-run started none of its own.
    """

    task_id: str
    seconds: list[float]
    adopted: float = 0.0

    @property
    def executions(self) -> int:
        return len(self.seconds)

    @property
    def needed(self) -> float:
        return max(self.seconds, default=0.0)

    @property
    def total(self) -> float:
        return sum(self.seconds)

    @property
    def redone(self) -> float:
        return self.total - self.needed


class _TaskTotal:
    """A :class:`DagWork` attribute: the same :class:`TaskWork` attribute summed over its tasks."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, dag: DagWork, owner: type | None = None) -> float:
        return sum(getattr(task, self.name) for task in dag.tasks)


@dataclass
class DagWork:
    """One DAG's measured tasks and their totals (each the sum of its tasks' own)."""

    dag_id: str
    tasks: list[TaskWork] = field(default_factory=list)

    executions = _TaskTotal()
    needed = _TaskTotal()
    redone = _TaskTotal()
    adopted = _TaskTotal()

    @property
    def redone_pct(self) -> float | None:
        """Redone seconds as a percentage of needed ones (None when nothing was needed)."""
        return self.redone / self.needed * 100 if self.needed else None


def _adopted(executions: list[Execution], rerun_start: float | None) -> float:
    if rerun_start is None or any(e.started >= rerun_start for e in executions):
        return 0.0
    return sum(e.seconds for e in executions if e.started < rerun_start < e.last_seen)


def summarize(
    labels: Mapping[str, LabelWork], reruns: Mapping[str, float] | None = None
) -> dict[str, DagWork]:
    """Per DAG, its tasks' needed, redone and adopted seconds (see :class:`TaskWork`).

    ``reruns`` maps a label (``dag_id/task_id``) to when its re-run attempt started (epoch
    seconds, same clock as the warehouse's); without it nothing counts as adopted. A label
    without ``/`` is filed under the DAG ``""``.
    """
    dags: dict[str, DagWork] = {}
    for label, work in sorted(labels.items()):
        dag_id, _, task_id = label.rpartition("/")
        rerun = (reruns or {}).get(label)
        task = TaskWork(task_id, work.seconds, _adopted(work.executions, rerun))
        dags.setdefault(dag_id, DagWork(dag_id)).tasks.append(task)
    return dags
