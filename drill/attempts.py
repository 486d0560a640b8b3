"""Airflow's record of the drill's tasks: every attempt, when it really ended and how it was stopped.

Attempts come from the REST API (``/tries``: ``task_instance_history`` plus the current try). A
reset attempt's history ``end_date`` is when it was archived, not when its process stopped — the
old worker keeps running until its heartbeat is refused — so the real end of each attempt is taken
from its task log's last write, and crashsafe's own log lines say how it ended. Every capability
reads the tasks through these facts (see docs/design.md, "How Airflow behaves on a crash").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "STOPPED_FOR_PERSON",
    "AttemptFact",
    "TaskFact",
    "attempts_from_tries",
    "overlaps",
    "parse_time",
    "stopped_for_person",
]

STOPPED_FOR_PERSON = "stopped: outcome unknown, needs a person"


@dataclass
class AttemptFact:
    """One executed attempt; times are epoch seconds."""

    try_number: int
    state: str | None
    start: float | None
    end: float | None
    log_end: float | None = None
    #: The host Airflow recorded for the attempt (its worker's hostname; None when unknown).
    hostname: str | None = None
    #: What the attempt's log says about how it ended: "fenced_out", "cancelled" (on_kill),
    #: "adopted" (it took over its predecessor's committed unit), "outcome_unknown" (a ledgered
    #: call stopped for a person) or None.
    outcome: str | None = None

    @property
    def real_end(self) -> float | None:
        """When the attempt's process last did something (its log), else Airflow's end date."""
        ends = [t for t in (self.log_end, self.end) if t is not None]
        return max(ends) if ends else None


@dataclass
class TaskFact:
    task_id: str
    final_state: str | None
    attempts: list[AttemptFact]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TaskFact:
        return cls(raw["task_id"], raw["final_state"], [AttemptFact(**a) for a in raw["attempts"]])


def parse_time(value: str | None) -> float | None:
    """Epoch seconds of an API timestamp (``2026-11-30T02:07:00.424654Z``)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _outcome(log_text: str) -> str | None:
    """How a stale attempt was stopped, from its task log (crashsafe's own log lines)."""
    if "OutcomeUnknown" in log_text:
        return "outcome_unknown"
    if "FencedOut" in log_text:
        return "fenced_out"
    if "adopted the work of" in log_text:
        return "adopted"
    if "crashsafe: on_kill: cancelling" in log_text:
        return "cancelled"
    return None


def attempts_from_tries(tries: list[dict[str, Any]], logs_dir: Path | None = None) -> list[AttemptFact]:
    """Attempts that actually started, oldest first, with the end of each one's task log."""
    attempts = []
    for entry in sorted(tries, key=lambda t: t["try_number"]):
        if entry.get("start_date") is None:
            continue
        log_end, outcome = None, None
        if logs_dir is not None:
            task_dir = f"dag_id={entry['dag_id']}/run_id=*/task_id={entry['task_id']}"
            pattern = f"{task_dir}/attempt={entry['try_number']}.log"
            logs = list(logs_dir.glob(pattern))
            log_end = max((p.stat().st_mtime for p in logs), default=None)
            outcome = _outcome("".join(p.read_text(errors="replace") for p in logs))
        attempts.append(
            AttemptFact(
                try_number=int(entry["try_number"]),
                state=entry.get("state"),
                start=parse_time(entry.get("start_date")),
                end=parse_time(entry.get("end_date")),
                log_end=log_end,
                hostname=entry.get("hostname") or None,
                outcome=outcome,
            )
        )
    return attempts


def overlaps(task: TaskFact) -> list[float]:
    """Seconds each superseded attempt was still alive after its successor started (> 0 only)."""
    found = []
    for old, new in zip(task.attempts, task.attempts[1:], strict=False):
        if old.real_end is not None and new.start is not None and old.real_end > new.start:
            found.append(old.real_end - new.start)
    return found


def stopped_for_person(task: TaskFact) -> bool:
    """A task that failed because a call's outcome was unknown and its target does not honour keys.

    Crashsafe's payment promise is "never two payments for one intended", not "every push
    succeeded": a push to a vendor that ignores idempotency keys stops with ``OutcomeUnknown``
    when an earlier attempt may have paid, and a person decides.
    """
    return (
        task.final_state == "failed"
        and bool(task.attempts)
        and task.attempts[-1].outcome == "outcome_unknown"
    )
