"""The ``doctor`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import json
import textwrap

from airflow_crashsafe.doctor.findings import EXIT_CODES, HAZARD, Finding, exit_code
from airflow_crashsafe.limits import DAY, Limit

__all__ = ["DESCRIPTION", "EPILOG", "add_arguments", "render", "run"]

DESCRIPTION = textwrap.fill(
    "Check this Airflow deployment for the hazards airflow-crashsafe knows (the metadata DB's "
    "idle_in_transaction_session_timeout, the identity the scheduler's metadata sessions carry for "
    "watch --heal, a live triggerer when adoption is on, the store connection seen from here, "
    "executor settings that make Airflow run a try twice) and print each with its fix. Reads "
    "Airflow's configuration where it runs; only the session identity needs a running scheduler.",
    width=79,
)
EPILOG = "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``doctor`` options."""
    parser.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    parser.add_argument(
        "--longest-task",
        type=Limit(0, 30 * DAY, above=True).argument(example=3600),
        default=3600.0,
        metavar="SECONDS",
        help="how long your longest task runs; a Celery visibility_timeout below it is a hazard "
        "(default 3600)",
    )


def render(findings: list[Finding]) -> str:
    """Plain text: one line per finding, its fix indented under each hazard."""
    width = max((len(f.check) for f in findings), default=0)
    lines = []
    for finding in findings:
        lines.append(f"{finding.status.upper():8} {finding.check:{width}}  {finding.summary}")
        if finding.status == HAZARD and finding.fix:
            lines.append(f"{'':8} {'':{width}}  fix: {finding.fix}")
    hazards = sum(f.status == HAZARD for f in findings)
    lines.append(f"{hazards} hazard(s) found" if hazards else "no hazard found")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run every check, print the findings, return the exit code the epilog lists."""
    from airflow_crashsafe.doctor.checks import DoctorSettings, run_checks

    findings = run_checks(DoctorSettings(longest_task=args.longest_task))
    code = exit_code(findings)
    if args.json:
        hazards = sum(f.status == HAZARD for f in findings)
        print(
            json.dumps(
                {"exit_code": code, "hazards": hazards, "findings": [f.as_json() for f in findings]}, indent=2
            )
        )
    else:
        print(render(findings))
    return code
