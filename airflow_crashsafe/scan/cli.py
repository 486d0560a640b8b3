"""``airflow-crashsafe scan``: the report, and the exit code CI gates on (``--fail-on``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.render import FORMATS

if TYPE_CHECKING:
    from airflow_crashsafe.scan.loader import ScanResult

__all__ = ["DESCRIPTION", "add_arguments", "exit_code", "run"]

DESCRIPTION = (
    "Load DAG files as Airflow does (a DagBag, no task executed) and give every task a verdict: "
    "protected, safe, risky (a re-run changes the outside world again) or unknown, with the reasons "
    "and the fix. See docs/scan.md."
)
FAIL_ON = ("risky", "unknown", "never")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="*", metavar="PATH", help="DAG files or folders (default: [core] dags_folder)"
    )
    parser.add_argument("--format", choices=FORMATS, default="text", help="report format (default: text)")
    parser.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        default="risky",
        help="exit 1 when a task is risky (default), risky or unknown, or never",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="also keep each scanned DAG's verdicts in the crashsafe store, for the UI's risk map",
    )


def exit_code(summary: dict[str, int], fail_on: str) -> int:
    """1 when the report holds what ``fail_on`` names, else 0."""
    if fail_on == "never":
        return 0
    bad = summary["risky"] + (summary["unknown"] if fail_on == "unknown" else 0)
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
        result = scan_paths(args.paths or None)
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
