"""The ``airflow-crashsafe`` console script.

Product commands only: the store, the ledger, the audit, the watchdog and the deployment doctor.
Subcommands import what they need only when they run. (The crash drill is the repository's proof
harness, ``./dev drill``; it is not part of the installed package.)

Exit codes: 0 success, 2 usage error or :class:`~airflow_crashsafe.errors.CrashsafeError`,
otherwise whatever the subcommand returns.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from airflow_crashsafe.errors import CrashsafeError

__all__ = ["build_parser", "main"]

PROG = "airflow-crashsafe"
EXIT_ERROR = 2


def _db_migrate(args: argparse.Namespace) -> int:
    from airflow_crashsafe.store import open_store

    store = open_store()
    try:
        version = store.migrate()
    finally:
        store.close()
    print(f"crashsafe store schema version {version}")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from airflow_crashsafe.doctor import cli as doctor_cli

    return int(doctor_cli.run(args))


def _watch(args: argparse.Namespace) -> int:
    from airflow_crashsafe.watchdog import cli as watch_cli

    return int(watch_cli.run(args))


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser."""
    parser = argparse.ArgumentParser(prog=PROG, description="airflow-crashsafe administration.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    db = commands.add_parser("db", help="manage the crashsafe store")
    db_commands = db.add_subparsers(dest="db_command", metavar="DB_COMMAND", required=True)
    migrate = db_commands.add_parser("migrate", help="create or upgrade the crashsafe store's tables")
    migrate.set_defaults(handler=_db_migrate)

    from airflow_crashsafe.audit import cli as audit_cli
    from airflow_crashsafe.cli import ledger
    from airflow_crashsafe.doctor import cli as doctor_cli  # imports Airflow only when it runs
    from airflow_crashsafe.watchdog import cli as watch_cli  # Airflow-free by design

    ledger.add_arguments(commands)
    audit_cli.add_arguments(commands)

    watch = commands.add_parser(
        "watch", help="watch the scheduler's heartbeat from outside Airflow and alert when it stops"
    )
    watch_cli.add_arguments(watch)
    watch.set_defaults(handler=_watch)

    doctor = commands.add_parser(
        "doctor",
        help="check this deployment for the hazards airflow-crashsafe knows, each with its fix",
        description=doctor_cli.DESCRIPTION,
        epilog=doctor_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doctor_cli.add_arguments(doctor)
    doctor.set_defaults(handler=_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(args_list)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except CrashsafeError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
