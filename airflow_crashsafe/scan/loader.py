"""Scan DAG files and folders: each file imported in a worker process, every task judged.

Files are listed as Airflow lists them (:mod:`.files`) and handed to a pool of worker processes
(:mod:`.isolation`) that import each one as Airflow's parser does — it runs the file's top-level
code — and judge its tasks (:mod:`.worker`). A file that fails to import, ends its process or
runs past the time limit is reported with why, and its tasks are still judged from its syntax
tree (:mod:`.static`); when even that fails, each task it names literally is ``unknown``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from airflow_crashsafe.scan.files import dag_files, default_timeout, repository_roots, search_folders
from airflow_crashsafe.scan.isolation import Outcome, WorkerPool, default_workers
from airflow_crashsafe.scan.model import FILE_STATUSES, FileReport, TaskVerdict
from airflow_crashsafe.scan.worker import FileJudge, judge, unjudged

__all__ = ["ScanResult", "judge", "scan_paths"]


class ScanResult:
    """Every task's verdict, and every file's outcome (the ones that did not import among them)."""

    def __init__(self, tasks: list[TaskVerdict], files: list[FileReport] | None = None) -> None:
        self.tasks = tasks
        self.files = files or []

    @property
    def import_errors(self) -> list[dict[str, Any]]:
        """The files that did not import, crashed or timed out, each with its status and error."""
        return [{"file": f.file, "error": f.error, "status": f.status} for f in self.files if f.failed]

    def summary(self) -> dict[str, Any]:
        counts = dict.fromkeys(("protected", "safe", "risky", "unknown"), 0)
        for t in self.tasks:
            counts[t.verdict] += 1
        statuses = dict.fromkeys(FILE_STATUSES, 0)
        for f in self.files:
            statuses[f.status] += 1
        return {
            "tasks": len(self.tasks),
            "dags": len({t.dag_id for t in self.tasks}),
            **counts,
            "import_errors": len(self.import_errors),
            "files": len(self.files),
            "file_status": statuses,
            "static": sum(1 for t in self.tasks if t.analysis == "static"),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks": [t.as_dict() for t in self.tasks],
            "summary": self.summary(),
            "import_errors": self.import_errors,
            "files": [f.as_dict() for f in self.files],
        }


def _default_paths() -> list[str]:
    from airflow.configuration import conf

    return [conf.get("core", "dags_folder")]


def _preload() -> None:
    """What every worker needs, imported once before the workers are forked from this process."""
    import airflow.dag_processing.dagbag
    import airflow.sdk  # noqa: F401

    import airflow_crashsafe.scan.static  # noqa: F401


def scan_paths(
    paths: Sequence[str] | None = None,
    *,
    timeout: float | None = None,
    plugins_folder: str | None = None,
    workers: int | None = None,
) -> ScanResult:
    """Scan DAG files and folders (default ``[core] dags_folder``).

    ``timeout``: seconds each phase of one file (its import, its judging) may take (default
    ``[core] dagbag_import_timeout``); ``plugins_folder`` (default ``[core] plugins_folder``)
    goes on ``sys.path`` with the DAGs' folders; ``workers``: processes (default: one per CPU).
    Warnings the scan's own imports raise are kept out of the caller's warning filters.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = dag_files(list(paths) if paths else _default_paths())
        limit = default_timeout() if timeout is None else timeout
        folders = search_folders(list(dict.fromkeys(root for root, _ in files)), plugins_folder)
        _preload()
    judge_ = FileJudge(folders, limit, repository_roots(folders))
    size = min(workers or default_workers(), max(1, len(files)))
    reports: dict[str, FileReport] = {}
    with WorkerPool(judge_.handle, size=size, timeout=limit, init=judge_.init) as pool:
        for _, file in files:
            pool.submit(file, ("import", file, "", ""))
        for outcome in pool.outcomes():
            report = _report(outcome, pool)
            if report is not None:
                reports[outcome.key] = report
    return _assemble([reports[f] for _, f in files if f in reports])


def _report(outcome: Outcome, pool: WorkerPool) -> FileReport | None:
    """The file's report; after a crash or a timeout, its syntax tree is read in a fresh worker."""
    kind, file, status, error = outcome.payload
    if outcome.status == "done":
        result: FileReport = outcome.result
        return result
    if kind == "import":
        pool.submit(file, ("static", file, outcome.status, outcome.error))
        return None
    return FileReport(file, status, error, unjudged(file, error))


def _assemble(reports: list[FileReport]) -> ScanResult:
    """One result; a DAG id two files define is an import error of the second, as in Airflow.

    Only imported DAGs clash: a file read from its syntax tree keeps its tasks whatever its DAG id
    (an id filled in at deploy time is often the same placeholder in every file).
    """
    owner: dict[str, str] = {}
    tasks: list[TaskVerdict] = []
    for report in reports:
        imported = {t.dag_id for t in report.tasks if t.analysis == "imported"}
        clashes = sorted(d for d in imported if owner.get(d, report.file) != report.file)
        for dag_id in imported:
            owner.setdefault(dag_id, report.file)
        if clashes:
            message = "; ".join(f"DAG id {d!r} is already defined in {owner[d]}" for d in clashes)
            report.status = "import_error" if report.status == "imported" else report.status
            report.error = "; ".join(e for e in (report.error, message) if e)
            report.tasks = [t for t in report.tasks if t.analysis != "imported" or t.dag_id not in clashes]
        tasks += report.tasks
    tasks.sort(key=lambda t: t.dag_id)  # stable: each DAG's tasks in the order Airflow gives them
    return ScanResult(tasks, reports)
