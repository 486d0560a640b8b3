"""Load DAG files as Airflow does (a DagBag, no task executed) and judge every task.

A file that fails to import is still reported: its import error, and each task its syntax tree
names, ``unknown`` with the error as the reason (one line for the whole file when no task can be
named).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.scan.lines import index_file
from airflow_crashsafe.scan.model import Reason, TaskVerdict
from airflow_crashsafe.scan.rules import classify_task, operator_path

__all__ = ["ScanResult", "scan_paths"]

FIX_IMPORT = "make the file import where the scan runs (install the provider it needs), then scan again"


class ScanResult:
    """Every task's verdict and every file that failed to import."""

    def __init__(self, tasks: list[TaskVerdict], import_errors: list[dict[str, Any]]) -> None:
        self.tasks = tasks
        self.import_errors = import_errors

    def summary(self) -> dict[str, Any]:
        counts = dict.fromkeys(("protected", "safe", "risky", "unknown"), 0)
        for t in self.tasks:
            counts[t.verdict] += 1
        return {
            "tasks": len(self.tasks),
            "dags": len({t.dag_id for t in self.tasks}),
            **counts,
            "import_errors": len(self.import_errors),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.as_dict() for t in self.tasks],
            "summary": self.summary(),
            "import_errors": self.import_errors,
        }


def _default_paths() -> list[str]:
    from airflow.configuration import conf

    return [conf.get("core", "dags_folder")]


def _bags(paths: Sequence[str]) -> Iterator[tuple[str, Any]]:
    from airflow.dag_processing.dagbag import DagBag

    for path in paths:
        if not os.path.exists(path):
            raise ConfigurationError(f"scan: {path} does not exist; give a DAG file or folder.")
        folder = str(Path(path).resolve() if os.path.isdir(path) else Path(path).resolve().parent)
        if folder not in sys.path:  # Airflow puts the DAGs folder on sys.path for the files' own imports
            sys.path.append(folder)
        yield path, DagBag(dag_folder=path)


def _error_line(message: str) -> str:
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else message


def _failed_file(path: str, message: str) -> list[TaskVerdict]:
    index = index_file(path)
    dag_id = index.dag_ids[0][0] if index.dag_ids else Path(path).stem
    reason = Reason(f"the file does not import: {_error_line(message)}", file=path)
    named = index.task_ids() or [("*", index.dag_ids[0][1] if index.dag_ids else 1)]
    return [
        TaskVerdict(dag_id, task_id, path, line, "?", "unknown", "import_error", [reason], FIX_IMPORT)
        for task_id, line in named
    ]


def _resolve(root: str, rel: str) -> str:
    candidate = Path(rel)
    if candidate.is_absolute() or candidate.exists():
        return str(candidate)
    base = Path(root)
    return str((base if base.is_dir() else base.parent) / rel)


def scan_paths(paths: Sequence[str] | None = None) -> ScanResult:
    """Scan DAG files and folders (default ``[core] dags_folder``).

    Warnings the DAG files raise while they load (deprecations in their imports) are theirs, not
    the scan's: they are kept out of the caller's warning filters.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _scan(paths)


def _scan(paths: Sequence[str] | None) -> ScanResult:
    tasks: list[TaskVerdict] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    for root, bag in _bags(list(paths) if paths else _default_paths()):
        for rel, message in sorted(bag.import_errors.items()):
            file = _resolve(root, rel)
            errors.append({"file": file, "error": _error_line(message)})
            tasks += _failed_file(file, message)
        for dag_id in sorted(bag.dags):
            if dag_id in seen:
                continue
            seen.add(dag_id)
            dag = bag.dags[dag_id]
            tasks += [judge(dag, task) for task in dag.tasks]
    return ScanResult(tasks, errors)


def judge(dag: Any, task: Any) -> TaskVerdict:
    """One task's line in the report."""
    file = str(dag.fileloc)
    line = index_file(file).line_of(task.task_id)
    finding = classify_task(task, dag)
    reasons = [r.located(file, line) for r in finding.reasons]
    return TaskVerdict(
        dag.dag_id,
        task.task_id,
        file,
        line,
        operator_path(task),
        finding.verdict,
        finding.category,
        reasons,
        finding.fix,
    )
