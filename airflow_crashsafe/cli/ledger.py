"""``airflow-crashsafe ledger show|prune|resolve``: read and tend the idempotency ledger.

``show`` passes every entry through the redaction policy (:mod:`airflow_crashsafe.redaction`):
rows written before it, or by an older version, may hold what it would have masked.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.options import LIMITS
from airflow_crashsafe.redaction import DEFAULT_POLICY
from airflow_crashsafe.store import ledger, open_store
from airflow_crashsafe.store.ledger import LedgerEntry

__all__ = ["add_arguments"]


def _positive_count(text: str) -> int:
    """``--limit``: a whole number, 1 or more (0 or less would list nothing, or everything)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of entries, 1 or more, not {text!r}")
    return value


def _show(args: argparse.Namespace) -> int:
    if not args.key and not args.dag:
        raise ConfigurationError("ledger show needs a KEY or --dag DAG_ID.")
    with open_store().transaction() as db:
        entries = ledger.list_entries(db, dag_id=args.dag, key=args.key, limit=args.limit)
    if args.key and not entries:
        raise ConfigurationError(f"No ledger entry has key {args.key}.")
    if args.json:
        print(json.dumps([_shown(entry) for entry in entries], indent=2, default=str))
    elif args.key:
        for field, value in _shown(entries[0]).items():
            print(f"{field:>16}  {value}")
    else:
        print(_table(entries))
    return 0


def _shown(entry: LedgerEntry) -> dict[str, Any]:
    """An entry's fields, its request, result and error redacted."""
    shown = dict(entry.__dict__)
    shown["request"] = DEFAULT_POLICY.request_record(entry.request)
    shown["result"] = DEFAULT_POLICY.value(entry.result)
    shown["error"] = None if entry.error is None else DEFAULT_POLICY.text(entry.error)
    return shown


def _table(entries: list[LedgerEntry]) -> str:
    header = ("key", "task", "partition", "target", "state", "sends", "replays", "status")
    rows = [header] + [
        (
            e.idem_key,
            e.task_id,
            e.slot_partition,
            e.target,
            e.state,
            str(e.send_count),
            str(e.replay_count),
            "" if e.response_status is None else str(e.response_status),
        )
        for e in entries
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


def _prune(args: argparse.Namespace) -> int:
    days = args.older_than_days if args.older_than_days is not None else config.ledger_retention_days()
    cutoff = datetime.now(timezone.utc) - timedelta(days=days)
    with open_store().transaction() as db:
        removed = ledger.prune(db, older_than=cutoff)
        fence_rows = ledger.prune_fences(db, older_than=cutoff)
    print(
        f"pruned {removed} ledger entries older than {days} days "
        f"and {fence_rows} fence rows of calls no longer in the ledger"
    )
    return 0


def _resolve(args: argparse.Namespace) -> int:
    state = "succeeded" if args.succeeded else "failed"
    with open_store().transaction() as db:
        entry = ledger.get_entry(db, args.key, lock=True)
        if entry is None:
            raise ConfigurationError(f"No ledger entry has key {args.key}.")
        if entry.state not in ("intent", "unknown"):
            raise ConfigurationError(
                f"Key {args.key} is {entry.state!r}, not unknown; only unknown outcomes are resolved by hand."
            )
        ledger.record_outcome(
            db,
            args.key,
            state=state,
            response_status=None,
            result={"resolved_by_hand": state} if args.succeeded else None,
            error=None if args.succeeded else "resolved by hand: not sent",
        )
    print(f"{args.key}: {state} (a retry now {'replays' if args.succeeded else 'sends again'})")
    return 0


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ledger`` command group to the console script's subcommands."""
    group = commands.add_parser("ledger", help="show, prune or resolve idempotency-ledger entries")
    sub = group.add_subparsers(dest="ledger_command", metavar="LEDGER_COMMAND", required=True)

    show = sub.add_parser("show", help="one key's entry, or a DAG's entries")
    show.add_argument("key", nargs="?", help="an idempotency key")
    show.add_argument("--dag", help="list the entries of this DAG")
    show.add_argument("--limit", type=_positive_count, default=200, help="most entries listed (default 200)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_show)

    prune = sub.add_parser("prune", help="delete entries older than the retention")
    prune.add_argument(
        "--older-than-days",
        type=LIMITS["ledger_retention_days"].argument(example=30),
        default=None,
        help="default: [crashsafe] ledger_retention_days (30)",
    )
    prune.set_defaults(handler=_prune)

    resolve = sub.add_parser("resolve", help="record by hand what an unknown outcome came to")
    resolve.add_argument("key")
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--succeeded", action="store_true", help="the target acted: retries replay")
    outcome.add_argument("--failed", action="store_true", help="the target did not act: retries send")
    resolve.set_defaults(handler=_resolve)
