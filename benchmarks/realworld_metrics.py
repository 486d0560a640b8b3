"""Match ``airflow-crashsafe scan`` output to hand labels and compute the scan's scores on them.

A label names a task by its repository, file (relative to the checkout) and task id; an id with
``*`` is a pattern for tasks whose ids came from a Variable or a loop. A label is matched to the
scan's tasks in the same file first, then, when the scan placed the task in another file (a DAG
built by a helper module), to tasks of the same DAG id. A pattern that matches several tasks takes
the worst verdict among them, the order the scan itself uses.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

__all__ = [
    "LABEL_TO_VERDICT",
    "Label",
    "Match",
    "ScannedTask",
    "match_labels",
    "score",
    "worst",
]

# What a correct scan says for each hand label.
LABEL_TO_VERDICT = {
    "risky": "risky",
    "safe": "safe",
    "protected": "protected",
    "unknown-by-nature": "unknown",
}
_SEVERITY = {"risky": 3, "unknown": 2, "protected": 1, "safe": 0}


@dataclass(frozen=True)
class Label:
    """One labelled task (a row of labels.csv)."""

    repo: str
    file: str
    dag_id: str
    task_id: str
    label: str
    category: str = ""


@dataclass(frozen=True)
class ScannedTask:
    """One task of the scan's JSON report, its file made relative to the repository root."""

    repo: str
    file: str
    dag_id: str
    task_id: str
    verdict: str
    category: str = ""


@dataclass
class Match:
    """A label and the scan tasks it matched (none when the scan did not name it)."""

    label: Label
    tasks: list[ScannedTask] = field(default_factory=list)
    by: str = ""  # "file", "dag" or "" when unmatched

    @property
    def verdict(self) -> str | None:
        return worst(t.verdict for t in self.tasks) if self.tasks else None


def worst(verdicts: Iterable[str]) -> str:
    """The most severe verdict: risky over unknown over protected over safe."""
    return max(verdicts, key=lambda v: _SEVERITY[v])


def relative_file(path: str, root: str) -> str:
    """``path`` relative to ``root`` (POSIX), or unchanged when it lies elsewhere."""
    p, r = PurePosixPath(path), PurePosixPath(root)
    try:
        return str(p.relative_to(r))
    except ValueError:
        return str(p)


def _ids_match(pattern: str, task_id: str) -> bool:
    return fnmatch.fnmatchcase(task_id, pattern) if "*" in pattern else pattern == task_id


def match_labels(labels: Sequence[Label], tasks: Sequence[ScannedTask]) -> list[Match]:
    """Each label with the scan tasks it names, by file and id, else by DAG id and id."""
    by_file: dict[tuple[str, str], list[ScannedTask]] = {}
    by_dag: dict[tuple[str, str], list[ScannedTask]] = {}
    for t in tasks:
        by_file.setdefault((t.repo, t.file), []).append(t)
        by_dag.setdefault((t.repo, t.dag_id), []).append(t)
    matches = []
    for label in labels:
        found = [t for t in by_file.get((label.repo, label.file), []) if _ids_match(label.task_id, t.task_id)]
        by = "file" if found else ""
        if not found:
            found = [
                t for t in by_dag.get((label.repo, label.dag_id), []) if _ids_match(label.task_id, t.task_id)
            ]
            by = "dag" if found else ""
        matches.append(Match(label, found, by))
    return matches


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def score(matches: Sequence[Match]) -> dict[str, Any]:
    """The figures issue targets are stated in, over one group of labels.

    ``named``: share of labels the scan reported at all. ``risky_recall``: labelled-risky tasks the
    scan called risky, over all labelled-risky tasks (an unnamed one counts as missed).
    ``risky_precision``: of the named tasks the scan called risky, the share labelled risky.
    ``false_safe``: labelled-risky tasks called safe or protected. ``unknown_share``: named tasks
    called unknown, over named tasks. ``agreement``: named tasks whose verdict is the label's.
    """
    named = [m for m in matches if m.tasks]
    risky = [m for m in matches if m.label.label == "risky"]
    called_risky = [m for m in named if m.verdict == "risky"]
    return {
        "tasks": len(matches),
        "named": len(named),
        "named_share": _ratio(len(named), len(matches)),
        "labelled_risky": len(risky),
        "risky_recall": _ratio(sum(1 for m in risky if m.verdict == "risky"), len(risky)),
        "called_risky": len(called_risky),
        "risky_precision": _ratio(
            sum(1 for m in called_risky if m.label.label == "risky"), len(called_risky)
        ),
        "false_safe": sum(1 for m in risky if m.verdict in {"safe", "protected"}),
        "unknown_share": _ratio(sum(1 for m in named if m.verdict == "unknown"), len(named)),
        "agreement": _ratio(
            sum(1 for m in named if m.verdict == LABEL_TO_VERDICT[m.label.label]), len(named)
        ),
        "matched_by_dag": sum(1 for m in named if m.by == "dag"),
    }
