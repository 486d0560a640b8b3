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
from airflow_crashsafe.limits import Limit
from airflow_crashsafe.options import LIMITS

__all__ = ["build_parser", "main"]

PROG = "airflow-crashsafe"
EXIT_ERROR = 2
#: ``db prune --older-than``: at least a day, so that no slot that can still be retried loses its fence.
OLDER_THAN = Limit(1, LIMITS["audit_retention_days"].high, integer=True, unit="days")


def _db_migrate(args: argparse.Namespace) -> int:
    from airflow_crashsafe.store import open_store

    store = open_store()
    try:
        version = store.migrate()
    finally:
        store.close()
    print(f"crashsafe store schema version {version}")
    return 0


def _db_prune(args: argparse.Namespace) -> int:
    """Delete old events, audit records, finished units and idle fence rows (see store.retention)."""
    from datetime import datetime, timedelta, timezone

    from airflow_crashsafe import config
    from airflow_crashsafe.store import open_store
    from airflow_crashsafe.store.dbapi import connect_target
    from airflow_crashsafe.store.retention import prune_store, prune_target
    from airflow_crashsafe.store.timeouts import lift_statement_timeout

    if args.older_than is not None:
        days = OLDER_THAN.check_int(args.older_than, "--older-than", example=90)
    else:
        days = config.audit_retention_days()
    if args.older_than is None and days == 0:
        print("[crashsafe] audit_retention_days is 0: nothing pruned (give --older-than DAYS)")
        return 0
    cutoff = datetime.now(timezone.utc) - timedelta(days=days)
    verb = "would delete" if args.dry_run else "deleted"
    with open_store().transaction() as db:
        lift_statement_timeout(db)
        counts = {"store": prune_store(db, older_than=cutoff, dry_run=args.dry_run)}
    for conn_id in args.conn_id:
        target = connect_target(conn_id)
        try:
            target.begin()
            counts[f"connection {conn_id!r}"] = prune_target(target, older_than=cutoff, dry_run=args.dry_run)
            target.rollback() if args.dry_run else target.commit()
        except BaseException:
            target.rollback()
            raise
        finally:
            target.close()
    for where, tables in counts.items():
        done = ", ".join(f"{n} from {table}" for table, n in tables.items()) or "no crashsafe tables"
        print(f"{where}: {verb} {done} (older than {days} days)")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from airflow_crashsafe.doctor import cli as doctor_cli

    return int(doctor_cli.run(args))


def _watch(args: argparse.Namespace) -> int:
    from airflow_crashsafe.watchdog import cli as watch_cli

    return int(watch_cli.run(args))


def _scan(args: argparse.Namespace) -> int:
    from airflow_crashsafe.scan import cli as scan_cli

    return int(scan_cli.run(args))


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser."""
    parser = argparse.ArgumentParser(prog=PROG, description="airflow-crashsafe administration.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    db = commands.add_parser("db", help="manage the crashsafe store")
    db_commands = db.add_subparsers(dest="db_command", metavar="DB_COMMAND", required=True)
    migrate = db_commands.add_parser("migrate", help="create or upgrade the crashsafe store's tables")
    migrate.set_defaults(handler=_db_migrate)
    prune = db_commands.add_parser(
        "prune",
        help="delete old events, attempt records, finished units and idle fence rows",
        description="Delete what crashsafe recorded before the retention window and no live slot "
        "needs: the store's events and audit records, and in each --conn-id target database its "
        "finished units and the fence rows of slots idle for the whole window (a fence row whose slot "
        "had a token issued or a commit within the window, or a running unit, is kept). The ledger "
        "has its own command: `ledger prune`.",
    )
    prune.add_argument(
        "--older-than",
        type=int,
        default=None,
        metavar="DAYS",
        help="default: [crashsafe] audit_retention_days",
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    prune.add_argument(
        "--conn-id",
        action="append",
        default=[],
        metavar="CONN_ID",
        help="a target database's Airflow connection whose units and fence rows to prune (repeatable); "
        "events do not record connections, so name each one",
    )
    prune.set_defaults(handler=_db_prune)

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

    from airflow_crashsafe.scan import cli as scan_cli  # imports Airflow only when it runs

    scan = commands.add_parser(
        "scan", help="name every task that is unsafe to run twice", description=scan_cli.DESCRIPTION
    )
    scan_cli.add_arguments(scan)
    scan.set_defaults(handler=_scan)
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
