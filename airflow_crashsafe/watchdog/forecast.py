"""When will a DAG run finish? The longest remaining path through its unfinished tasks.

A run's forecast finish is ``now`` plus the longest path, through the DAG's task dependencies, of
the tasks not yet done, each weighted by what is left of it: a task not started counts its
expected duration (the median of its recent successful tries, or a default when it has none), a
running task counts its expected duration minus the time it has already run (never below 0), a
task that is done counts nothing. The tasks on that path are the critical path: they, and only
they, decide the finish. Mapped tasks count per task: done when every map index is, running as
the longest-running index. Pure and linear in tasks + edges (no recursion), so a 1,000-task DAG
forecasts in milliseconds. See docs/design.md, "Watchdog and alerting".
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = [
    "DONE_STATES",
    "STARTED_STATES",
    "Forecast",
    "TaskProgress",
    "expected_durations",
    "forecast_finish",
]

#: Task states that need nothing more for the run to finish.
DONE_STATES = frozenset({"success", "skipped", "removed"})
#: Task states that count as started: what is left is the expected duration minus the time run.
STARTED_STATES = frozenset({"running", "deferred"})


@dataclass(frozen=True)
class TaskProgress:
    """One task instance of the run as last seen: its state and, when running, its start."""

    task_id: str
    state: str | None
    start_date: datetime | None = None
    map_index: int = -1


@dataclass(frozen=True)
class Forecast:
    """The forecast finish and the tasks driving it, each with its remaining seconds."""

    finish: datetime
    remaining_seconds: float
    critical_path: tuple[tuple[str, float], ...]

    def describe(self) -> dict[str, object]:
        """A JSON-friendly summary for alert details."""
        return {
            "forecast_finish": self.finish.isoformat(),
            "remaining_seconds": round(self.remaining_seconds, 1),
            "critical_path": [
                {"task_id": task, "remaining_seconds": round(left, 1)} for task, left in self.critical_path
            ],
        }


def expected_durations(
    history: Mapping[str, Sequence[float]], tasks: Iterable[str], default: float
) -> dict[str, float]:
    """Per task, the median of its recent successful durations, else ``default``."""
    out: dict[str, float] = {}
    for task in tasks:
        durations = [d for d in history.get(task, ()) if d is not None and d >= 0]
        out[task] = float(statistics.median(durations)) if durations else default
    return out


def _remaining(
    downstream: Mapping[str, Sequence[str]],
    progress: Iterable[TaskProgress],
    expected: Mapping[str, float],
    now: datetime,
) -> dict[str, float]:
    """What is left of each task: 0 when done, the expected remainder when running, else all of it."""
    by_task: dict[str, list[TaskProgress]] = {}
    for ti in progress:
        by_task.setdefault(ti.task_id, []).append(ti)
    left: dict[str, float] = {}
    for task in downstream:
        instances = by_task.get(task, [])
        full = expected.get(task, 0.0)
        pending = [ti for ti in instances if ti.state not in DONE_STATES]
        if instances and not pending:
            left[task] = 0.0
        elif not instances or any(ti.state not in STARTED_STATES for ti in pending):
            # No task instance yet, or one not started (or failed, to be retried): all of it.
            left[task] = full
        else:
            started = [ti.start_date for ti in pending if ti.start_date is not None]
            ran = (now - min(started)).total_seconds() if started else 0.0
            left[task] = max(full - ran, 0.0)
    return left


def forecast_finish(
    downstream: Mapping[str, Sequence[str]],
    progress: Iterable[TaskProgress],
    expected: Mapping[str, float],
    now: datetime,
) -> Forecast:
    """The forecast finish of one run of the DAG whose dependencies are ``downstream``.

    :param downstream: every task id of the DAG mapped to its downstream task ids.
    :param progress: the run's task instances (may be empty: a run not started or not created).
    :param expected: per task, its expected duration in seconds (see :func:`expected_durations`).
    """
    left = _remaining(downstream, progress, expected, now)
    indegree = dict.fromkeys(downstream, 0)
    for children in downstream.values():
        for child in children:
            if child in indegree:
                indegree[child] += 1
    order = [task for task, count in indegree.items() if count == 0]
    for task in order:  # Kahn's topological order; ``order`` grows while iterated
        for child in downstream[task]:
            if child in indegree:
                indegree[child] -= 1
                if indegree[child] == 0:
                    order.append(child)
    longest: dict[str, float] = {}
    nxt: dict[str, str | None] = {}
    for task in reversed(order):  # longest path starting at each task, downstream first
        best, best_child = 0.0, None
        for child in downstream[task]:
            if child in longest and longest[child] > best:
                best, best_child = longest[child], child
        longest[task] = left[task] + best
        nxt[task] = best_child
    start = max(longest, key=lambda t: longest[t], default=None)
    path: list[tuple[str, float]] = []
    step = start
    while step is not None:
        if left[step] > 0:
            path.append((step, left[step]))
        step = nxt[step]
    total = longest[start] if start is not None else 0.0
    return Forecast(now + timedelta(seconds=total), total, tuple(path))
