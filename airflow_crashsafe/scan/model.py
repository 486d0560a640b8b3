"""What the scan says about a task: a verdict, its category, the reasons and the fix.

Verdicts, from best to worst for a re-run (docs/scan.md):

- ``protected``: crashsafe protects it (its operators, ``fenced_transaction``, ``effect()``, or
  ``replay_safe`` with a reason);
- ``safe``: running it again changes nothing;
- ``unknown``: nothing static can decide;
- ``risky``: running it again changes the outside world again.

A task made of several parts (statements, calls) takes the worst part's verdict, where ``risky``
beats ``unknown``: one known duplicate effect is enough to name the task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ANALYSES",
    "FILE_STATUSES",
    "VERDICTS",
    "FileReport",
    "Finding",
    "Reason",
    "TaskVerdict",
    "combine",
    "worst",
]

VERDICTS = ("protected", "safe", "unknown", "risky")
_RANK = {"safe": 0, "protected": 1, "unknown": 2, "risky": 3}
#: How a task was read: from the live objects of an imported file, or from the syntax tree of a
#: file that did not import.
ANALYSES = ("imported", "static")
#: What became of a file: imported; failed to import (an exception, Airflow's own import timeout);
#: ended the process that imported it (``os._exit``, a signal, a segfault); or ran past the limit.
FILE_STATUSES = ("imported", "import_error", "crashed", "timed_out")


@dataclass(frozen=True)
class Reason:
    """One statement or call that decided a verdict, where it is, and why it matters."""

    why: str
    evidence: str = ""
    file: str | None = None
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"why": self.why, "evidence": self.evidence, "file": self.file, "line": self.line}

    def located(self, file: str | None, line: int | None) -> Reason:
        """This reason, placed at ``file:line`` unless it already knows where it is."""
        if self.file is not None:
            return self
        return Reason(self.why, self.evidence, file, line)


@dataclass
class Finding:
    """The verdict on one part of a task (a statement, a call) or on the whole task."""

    verdict: str
    category: str
    reasons: list[Reason] = field(default_factory=list)
    fix: str = ""


@dataclass
class TaskVerdict:
    """A task's line in the report."""

    dag_id: str
    task_id: str
    file: str
    line: int | None
    operator: str
    verdict: str
    category: str
    reasons: list[Reason]
    fix: str
    analysis: str = "imported"

    def as_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "file": self.file,
            "line": self.line,
            "operator": self.operator,
            "verdict": self.verdict,
            "category": self.category,
            "reasons": [r.as_dict() for r in self.reasons],
            "fix": self.fix,
            "analysis": self.analysis,
        }


@dataclass
class FileReport:
    """One DAG file's outcome: its status, the error when it did not import, its tasks' verdicts.

    Plain data, so a worker process can send it back to the scan.
    """

    file: str
    status: str
    error: str = ""
    tasks: list[TaskVerdict] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status != "imported"

    def as_dict(self) -> dict[str, Any]:
        static = sum(1 for t in self.tasks if t.analysis == "static")
        return {
            "file": self.file,
            "status": self.status,
            "error": self.error,
            "tasks": len(self.tasks),
            "static_tasks": static,
        }


def worst(verdicts: Iterable[str]) -> str:
    """The verdict a task takes from its parts' verdicts (``safe`` when it has none)."""
    return max(verdicts, key=_RANK.__getitem__, default="safe")


def combine(findings: list[Finding], *, pure_category: str = "pure") -> Finding:
    """One finding from a task's parts: the worst verdict, with the reasons and fix of its parts.

    Only the parts that share the worst verdict give their reasons (a risky INSERT is what a
    reader must see, not the SELECT before it), and the last of them its category (the write a
    script ends with says more than the DELETE before it); a task with no parts is ``safe``.
    """
    if not findings:
        return Finding("safe", pure_category, [Reason("no side effect found")])
    verdict = worst(f.verdict for f in findings)
    chosen = [f for f in findings if f.verdict == verdict]
    reasons = [r for f in chosen for r in f.reasons]
    fixes = list(dict.fromkeys(f.fix for f in chosen if f.fix))
    return Finding(verdict, chosen[-1].category, reasons, "; ".join(fixes))
