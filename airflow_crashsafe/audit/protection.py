"""How a slot is protected against running twice, from what crashsafe itself recorded.

In order: *declared replay-safe* (the task was marked with :func:`replay_safe` or its operator
class sets ``crashsafe_replay_safe = True``; recorded with each attempt at start), *fenced*
(crashsafe's fenced writes recorded committed / fenced_out / skipped_committed events for the
slot's runs), *ledgered* (idempotency-ledger entries for the slot), else *unprotected*. Evidence
from the slot itself comes first; a task seen fenced or ledgered in other runs counts too, since a
re-run killed before its first protected write leaves no evidence of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from airflow_crashsafe.audit.classify import Execution

__all__ = ["PROTECTIONS", "Evidence", "replay_safe"]

PROTECTIONS = ("declared_replay_safe", "fenced", "ledgered", "unprotected")
_FENCE_KINDS = ("committed", "fenced_out", "skipped_committed")
_T = TypeVar("_T")


def replay_safe(task: _T, reason: str = "") -> _T:
    """Declare a task safe to run twice (e.g. an idempotent overwrite of a derived partition).

    Accepts an operator or a TaskFlow call's result; returns it, so it wraps a definition::

        replay_safe(SQLExecuteQueryOperator(task_id="rebuild_day", sql=...), "overwrites its day")
        replay_safe(summarise())
    """
    operator: Any = getattr(task, "operator", task)  # XComArg -> its operator
    operator.crashsafe_replay_safe = True
    operator.crashsafe_replay_safe_reason = reason
    return task


class Evidence:
    """Protection evidence for a set of DAGs: crashsafe events and ledger entries, indexed once."""

    def __init__(self, events: Iterable[Mapping[str, Any]], ledger: Iterable[Mapping[str, Any]]) -> None:
        self._by_run: dict[tuple[str, str, int, str], set[str]] = {}
        self._by_part: dict[tuple[str, str, int, str], set[str]] = {}
        self._by_task: dict[tuple[str, str], set[str]] = {}
        for e in events:
            if e.get("kind") in _FENCE_KINDS:
                self._add("fenced", e)
        for entry in ledger:
            self._add("ledgered", entry)

    def _add(self, kind: str, rec: Mapping[str, Any]) -> None:
        dag, task, idx = str(rec["dag_id"]), str(rec["task_id"]), int(rec.get("map_index", -1))
        if rec.get("run_id"):
            self._by_run.setdefault((dag, task, idx, str(rec["run_id"])), set()).add(kind)
        self._by_part.setdefault((dag, task, idx, str(rec["slot_partition"])), set()).add(kind)
        self._by_task.setdefault((dag, task), set()).add(kind)

    def __call__(self, slot: tuple[str, str, int, str], runs: Sequence[Execution]) -> tuple[str, list[str]]:
        """``(protection, evidence)`` for one slot and its executions."""
        dag, task, idx, _part = slot
        declared = [e for e in runs if e.replay_safe]
        if declared and len(declared) == len([e for e in runs if e.replay_safe is not None]):
            return "declared_replay_safe", [f"declared replay-safe ({declared[-1].operator})"]
        found = set(self._by_part.get(slot, set()))
        for run_id in {e.run_id for e in runs}:
            found |= self._by_run.get((dag, task, idx, run_id), set())
        where = "this slot"
        if not found:
            found = set(self._by_task.get((dag, task), set()))
            where = "other runs of this task"
        if not found:
            hinted = {_operator_kind(e.operator) for e in runs} - {None}
            found = {k for k in hinted if k}
            where = "its crashsafe operator"
        for kind in ("fenced", "ledgered"):
            if kind in found:
                return kind, [f"{kind}: crashsafe records in {where}"]
        return "unprotected", []


def _operator_kind(path: str | None) -> str | None:
    if not path or not path.startswith("airflow_crashsafe.operators."):
        return None
    return "ledgered" if ".http." in path else "fenced"
