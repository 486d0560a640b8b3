"""``airflow-crashsafe audit reconcile`` and ``airflow-crashsafe duplicates``.

Both attach with ``set_defaults(handler=...)`` and return an exit code: ``duplicates`` exits 1
when it lists a risky slot (so cron and CI can act on it), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.limits import HOUR, Limit

if TYPE_CHECKING:
    from airflow_crashsafe.audit.classify import SlotReport
    from airflow_crashsafe.store.store import Store

__all__ = ["add_arguments", "duration", "find_duplicates"]


#: The longest duration accepted: a window reaching before any attempt (a century) is as good as all.
MAX_DURATION = timedelta(days=36500)


def duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``24h``, ``7d`` -> a timedelta, at most :data:`MAX_DURATION`."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a duration like 30m, 24h or 7d, not {text!r}")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
    try:
        value = timedelta(**{unit: float(match.group(1))})
    except OverflowError:
        value = timedelta.max
    if value > MAX_DURATION:
        raise argparse.ArgumentTypeError(f"{text!r} is too long: give at most {MAX_DURATION.days}d")
    return value


def _env(name: str | None) -> str | None:
    if not name:
        return None
    value = os.environ.get(name)
    if not value:
        raise ConfigurationError(f"environment variable {name} is not set: export it")
    return value


def _reconcile(args: argparse.Namespace) -> int:
    from airflow_crashsafe.audit import digest
    from airflow_crashsafe.audit.reconcile import AirflowApi, reconcile
    from airflow_crashsafe.audit.spool import default_spool_dir, deliver
    from airflow_crashsafe.store import open_store

    if args.api_user and not args.api_password_env:
        raise ConfigurationError("--api-user needs --api-password-env VAR (the password is never a flag)")
    api = AirflowApi(
        args.api_url,
        token=_env(args.api_token_env),
        username=args.api_user,
        password=_env(args.api_password_env),
        timeout=args.timeout,
    )
    store = open_store()
    # Events a task process spooled just before it exited would otherwise wait for the next task.
    delivered = deliver(store, default_spool_dir())
    if delivered:
        print(f"delivered {delivered} spooled audit events from {default_spool_dir()}")
    report = reconcile(store, api, grace=args.grace)
    print(
        f"reconciled {report.task_instances} task instances: {report.ends_filled} ends filled, "
        f"{report.tries_added} tries added, {report.still_running} still running, "
        f"{len(report.not_found)} not found, {len(report.errors)} errors"
    )
    # Keep the UI's duplicate digest current, so no page view has a backlog to catch up on.
    print(f"duplicate digest: {digest.refresh(store).task_instances} task instances reclassified")
    for line in report.errors:
        print(f"  error: {line}")
    return 1 if report.errors else 0


def find_duplicates(store: Store, *, since: timedelta, dag_id: str | None = None) -> list[SlotReport]:
    """Classified duplicate executions of slots active in the last ``since`` (no digest: from scratch)."""
    from airflow_crashsafe.audit.classify import classify
    from airflow_crashsafe.audit.protection import Evidence
    from airflow_crashsafe.store.attempts import slot_rows
    from airflow_crashsafe.store.evidence import protection_records

    events: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    with store.transaction() as db:
        rows = slot_rows(db, since=datetime.now(timezone.utc) - since, dag_id=dag_id)
        for dag in sorted({r["dag_id"] for r in rows}):
            found = protection_records(db, dag, sorted({r["task_id"] for r in rows if r["dag_id"] == dag}))
            events += found[0]
            entries += found[1]
    return classify(rows, Evidence(events, entries))


def _table(reports: list[SlotReport]) -> str:
    header = ("dag", "task", "partition", "runs", "classification", "overlap", "protection", "risk")
    rows = [header]
    for r in reports:
        task = r.task_id + (f"[{r.map_index}]" if r.map_index >= 0 else "")
        rows.append(
            (
                r.dag_id,
                task,
                r.partition,
                str(len(r.executions)),
                "+".join(r.kinds),
                f"{r.overlap_seconds:.1f}s" if r.overlap_seconds else "-",
                r.protection,
                r.risk,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


#: What ``duplicates --json`` says of a slot, besides its executions.
_JSON_FIELDS = (
    "dag_id",
    "task_id",
    "map_index",
    "partition",
    "kinds",
    "overlap_seconds",
    "protection",
    "protection_evidence",
    "risk",
)


def _as_json(r: SlotReport) -> dict[str, Any]:
    return {
        **{name: getattr(r, name) for name in _JSON_FIELDS},
        "executions": [
            {
                **e.__dict__,
                "started_at": e.started_at.isoformat(),
                "ended_at": e.ended_at.isoformat() if e.ended_at else None,
                "last_seen_at": e.last_seen_at.isoformat() if e.last_seen_at else None,
            }
            for e in r.executions
        ],
    }


def _duplicates(args: argparse.Namespace) -> int:
    from airflow_crashsafe.store import open_store

    store = open_store()
    reports = find_duplicates(store, since=args.since, dag_id=args.dag)
    if args.json:
        print(json.dumps([_as_json(r) for r in reports], indent=2, default=str))
    elif reports:
        print(_table(reports))
    else:
        print(f"no duplicate executions in the last {args.since}")
    if args.alert_config:
        from airflow_crashsafe.alerting import Dispatcher, FileOutbox, build_sinks, load_config_file
        from airflow_crashsafe.audit.alerts import alert_risky

        sinks = build_sinks(load_config_file(args.alert_config).get("sinks", []), source=args.alert_config)
        outbox = (
            Path(args.state_dir or Path.home() / ".local" / "state" / "airflow-crashsafe")
            / "audit-outbox.jsonl"
        )
        raised = alert_risky(
            store, Dispatcher(sinks, outbox=FileOutbox(outbox)), reports, min_risk=args.min_risk
        )
        print(f"alerted {len(raised)} new risky slots")
    return 1 if any(r.risk in ("high", "critical") for r in reports) else 0


def add_arguments(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``audit reconcile`` and ``duplicates`` to the console script's subcommands."""
    audit = commands.add_parser("audit", help="attempt records: reconcile ends from Airflow's history")
    sub = audit.add_subparsers(dest="audit_command", metavar="AUDIT_COMMAND", required=True)
    rec = sub.add_parser("reconcile", help="fill attempt ends no hook reported (resets, SIGKILLs)")
    rec.add_argument(
        "--api-url",
        default=os.environ.get("AIRFLOW_API_URL", "http://localhost:8080"),
        help="api-server root URL (default $AIRFLOW_API_URL or http://localhost:8080)",
    )
    rec.add_argument("--api-token-env", metavar="VAR", help="environment variable with a bearer token")
    rec.add_argument("--api-user", help="user for POST /auth/token (password from --api-password-env)")
    rec.add_argument("--api-password-env", metavar="VAR", help="environment variable with the password")
    rec.add_argument(
        "--grace",
        type=duration,
        default=timedelta(seconds=60),
        help="only attempts started longer ago than this (default 60s)",
    )
    timeout = Limit(0, HOUR, above=True).argument(example=10)
    rec.add_argument("--timeout", type=timeout, default=10.0, help="HTTP timeout, s (default 10)")
    rec.set_defaults(handler=_reconcile)

    dup = commands.add_parser("duplicates", help="list duplicate executions with protection and risk")
    dup.add_argument("--since", type=duration, default=timedelta(hours=24), help="window (default 24h)")
    dup.add_argument("--dag", help="only this DAG")
    dup.add_argument("--json", action="store_true", help="print JSON")
    dup.add_argument(
        "--alert-config",
        metavar="FILE",
        help="TOML/JSON with [[sinks]] (as the watchdog's): alert new risky slots once",
    )
    dup.add_argument(
        "--min-risk",
        choices=("low", "high", "critical"),
        default="high",
        help="lowest risk that alerts (default high)",
    )
    dup.add_argument(
        "--state-dir", help="where the alert outbox lives (default ~/.local/state/airflow-crashsafe)"
    )
    dup.set_defaults(handler=_duplicates)
