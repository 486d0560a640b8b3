"""What a scan worker does with one DAG file: import it as Airflow does, judge its tasks, read the rest.

The judging happens here, in the process that holds the live DAG and task objects; what goes back
to the scan is plain data (:class:`~airflow_crashsafe.scan.model.FileReport`). A file that does
not import is read from its syntax tree (:mod:`.static`), and so are the DAGs of a file that
imported only in part.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airflow_crashsafe.scan.lines import index_file
from airflow_crashsafe.scan.model import FileReport, Reason, TaskVerdict
from airflow_crashsafe.scan.rules import classify_task, operator_path
from airflow_crashsafe.scan.static import judge_file
from airflow_crashsafe.scan.static_module import Roots

__all__ = ["FIX_IMPORT", "FileJudge", "error_line", "judge", "unjudged"]

FIX_IMPORT = "make the file import where the scan runs (install the provider it needs), then scan again"
_TIMEOUT = re.compile(r"AirflowTaskTimeout|DagBag import timeout")
Phase = Callable[[str], None]


def error_line(message: str) -> str:
    """The exception line of an import error (Airflow gives a traceback, or just the message)."""
    lines = [ln.rstrip() for ln in message.strip().splitlines() if ln.strip()]
    if not lines:
        return message
    if lines[0].startswith("Traceback"):
        frames = [i for i, ln in enumerate(lines) if ln.startswith(" ")]
        if frames and frames[-1] + 1 < len(lines):
            return lines[frames[-1] + 1].strip()
    return lines[-1].strip()


def judge(dag: Any, task: Any) -> TaskVerdict:
    """One imported task's line in the report."""
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


def unjudged(path: str, error: str) -> list[TaskVerdict]:
    """The tasks a file names literally, ``unknown``, when even its syntax tree could not be read."""
    index = index_file(path)
    dag_id = index.dag_ids[0][0] if index.dag_ids else Path(path).stem
    reason = Reason(f"the file does not import: {error}", file=path)
    named: list[tuple[str, int | None]] = [*index.task_ids()] or [
        ("*", index.dag_ids[0][1] if index.dag_ids else None)
    ]
    return [
        TaskVerdict(
            dag_id,
            task_id,
            path,
            line,
            "?",
            "unknown",
            "import_error",
            [reason],
            FIX_IMPORT,
            analysis="static",
        )
        for task_id, line in named
    ]


class FileJudge:
    """One worker's state: the folders on ``sys.path``, and the repository modules static analysis
    has read (found in those folders and in ``extra_roots``, the checkouts around them)."""

    def __init__(self, folders: Sequence[str], timeout: float, extra_roots: Sequence[str] = ()) -> None:
        self.folders = list(folders)
        self.timeout = timeout
        self.roots = Roots(self.folders, extra_roots)

    def init(self) -> None:
        """In the worker, once: the folders on ``sys.path`` and Airflow's import timeout set."""
        warnings.simplefilter("ignore")  # a DAG file's deprecations are the file's, not the scan's
        for folder in self.folders:
            if folder not in sys.path:
                sys.path.append(folder)
        os.environ["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = str(self.timeout)

    def handle(self, job: tuple[str, str, str, str], phase: Phase) -> FileReport:
        """``("import", file, "", "")``, or ``("static", file, status, error)`` after a crash."""
        kind, path, status, error = job
        if kind == "import":
            return self.import_file(path, phase)
        phase("reading the syntax tree of")
        return FileReport(path, status, error, self.static(path, error))

    def static(self, path: str, error: str) -> list[TaskVerdict]:
        why = f"the file does not import here ({error})"
        return judge_file(path, self.roots, why) or unjudged(path, error)

    def import_file(self, path: str, phase: Phase) -> FileReport:
        from airflow.dag_processing.dagbag import DagBag

        phase("importing")
        bag = DagBag(dag_folder=path)
        errors = [error_line(str(m)) for _, m in sorted(bag.import_errors.items())]
        phase("judging the tasks of")
        tasks = [judge(bag.dags[d], task) for d in sorted(bag.dags) for task in bag.dags[d].tasks]
        if not errors:
            return FileReport(path, "imported", "", tasks)
        error = "; ".join(dict.fromkeys(errors))
        status = "timed_out" if _TIMEOUT.search(error) else "import_error"
        phase("reading the syntax tree of")
        static = [t for t in self.static(path, error) if t.dag_id not in bag.dags]
        return FileReport(path, status, error, tasks + static)
