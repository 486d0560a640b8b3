"""``airflow-crashsafe scan``: the report, and the exit code CI gates on (``--fail-on``).

Exit codes: 0 when the report holds nothing ``--fail-on`` names; 1 when it does — with ``risky``
(the default) a risky task or a DAG file that did not import, crashed or timed out (the gate fails
closed on what it could not judge), with ``unknown`` also an unknown task; never with ``never``;
2 for a usage error (a path that does not exist, a bad option).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.scan.render import FORMATS

if TYPE_CHECKING:
    from airflow_crashsafe.scan.loader import ScanResult

__all__ = ["DESCRIPTION", "add_arguments", "exit_code", "run"]

DESCRIPTION = (
    "Import DAG files as Airflow's parser does (each in a worker process with a time limit; the "
    "files' top-level code runs, no task is executed) and give every task a verdict: protected, "
    "safe, risky (a re-run changes the outside world again) or unknown, with the reasons and the "
    "fix. A file that does not import is read from its syntax tree. Exit 1 when a task is risky or "
    "a file could not be imported (--fail-on risky, the default). See docs/scan.md."
)
FAIL_ON = ("risky", "unknown", "never")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("give a number of seconds greater than 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="DAG files or folders (default: [core] dags_folder)"
    )
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default: text)")
    parser.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="risky",
        help="exit 1 when a task is risky or a file could not be imported (default), also when a task "
        "is unknown, or never",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=None,
        metavar="SECONDS",
        help="how long importing one file, and then judging it, may each take before its process is "
        "stopped (default: [core] dagbag_import_timeout, 30)",
    )
    parser.add_argument(
        "--plugins-folder",
        default=None,
        metavar="PATH",
        help="put this folder on sys.path for the DAG files' imports, as Airflow does with its plugins "
        "folder (default: [core] plugins_folder)",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="also keep each scanned DAG's verdicts in the crashsafe store, for the UI's risk map",
    )


def exit_code(summary: dict[str, Any], fail_on: str) -> int:
    """1 when the report holds what ``fail_on`` names (files that did not import count), else 0."""
    if fail_on == "never":
        return 0
    bad = summary["risky"] + summary["import_errors"] + (summary["unknown"] if fail_on == "unknown" else 0)
    return 1 if bad else 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Airflow's logging writes to stdout while DAG files load; the report must own stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run(args: argparse.Namespace) -> int:
    from airflow_crashsafe.scan.loader import scan_paths
    from airflow_crashsafe.scan.render import render

    with _stdout_to_stderr():
        result = scan_paths(args.paths or None, timeout=args.timeout, plugins_folder=args.plugins_folder)
    print(render(result, args.format))
    if args.record:
        _record(result)
    return exit_code(result.summary(), args.fail_on)


def _record(result: ScanResult) -> None:
    import time

    from airflow_crashsafe.store import open_store
    from airflow_crashsafe.store.scans import record

    with open_store().transaction() as db:
        written = record(db, [t.as_dict() for t in result.tasks], scanned_at=time.time())
    print(
        f"recorded {written} task verdicts of {result.summary()['dags']} DAGs in the crashsafe store",
        file=sys.stderr,
    )
