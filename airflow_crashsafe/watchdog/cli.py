"""The ``watch`` subcommand: ``add_arguments(parser)`` and ``run(args) -> int``.

Settings come from flags, else the ``[watch]`` table of ``--config`` (TOML or JSON, same names
with underscores), else defaults; :mod:`airflow_crashsafe.watchdog.settings` declares them and
checks every number once (a nan or infinite one is refused, naming the flag or the file). Sinks
come only from the config file's ``sinks`` list (see :mod:`airflow_crashsafe.alerting.config`).
Secrets are read from environment variables named by ``*_env`` options, never taken as flag
values. Exit codes: 0 stopped cleanly (``--once``: all healthy), 1 ``--once`` found a problem, 2
bad configuration. ``--once`` waits for deliveries at most ``--once-deadline`` seconds in all
(however many sinks stall, whatever their retries).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from airflow_crashsafe.dsn import safe_db_url
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.settings import DEFAULTS, settings

__all__ = ["add_arguments", "main", "run"]

log = logging.getLogger("airflow_crashsafe.watchdog")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``watch`` options; every default is None so the config file can fill it in."""
    a = parser.add_argument
    a(
        "--config",
        help="TOML/JSON file with a [watch] table, [[sinks]] (alert destinations) and [[deadlines]]",
    )
    a("--api-url", help=f"api-server root URL (default {DEFAULTS['api_url']})")
    a(
        "--db-url",
        help="read the metadata DB's job table instead of the api-server (no password here: "
        "use --db-url-env)",
    )
    a("--db-url-env", metavar="VAR", help="environment variable holding the metadata DB URL")
    a("--interval", type=float, help="seconds between polls (default 10)")
    a("--threshold", type=float, help="heartbeat age that means dead, s (default 30, Airflow's)")
    a(
        "--grace",
        type=float,
        help="how long a problem must last before it pages, s (default 0: the "
        "heartbeat threshold already is the grace for a quick restart)",
    )
    a("--repeat-interval", type=float, help="re-alert an open incident every N s; 0 = never (default 3600)")
    for name in ("triggerer", "dag-processor"):
        a(
            f"--expect-{name}",
            choices=("auto", "yes", "no"),
            help=f"alert on a dead {name} (auto: if one ever ran)",
        )
    a("--canary-dag-id", help="DAG whose newest successful run proves scheduling works")
    a("--canary-max-age", type=float, help="seconds the canary's newest success may be old")
    a("--api-token-env", metavar="VAR", help="environment variable with an API bearer token")
    a("--api-user", help="API user for /auth/token (password from --api-password-env)")
    a("--api-password-env", metavar="VAR", help="environment variable with the API user's password")
    a(
        "--state-dir",
        help="where state.json, deadlines.json and outbox.jsonl live (default "
        "$CRASHSAFE_WATCH_STATE_DIR, else ~/.local/state/airflow-crashsafe/<instance>-<hash of "
        "instance and URL>: one per Airflow)",
    )
    a("--instance", help="name of this Airflow in alerts (default: the API/DB host)")
    a("--timeout", type=float, help="timeout of one request to Airflow, s (default 5)")
    a(
        "--delivery-deadline",
        type=float,
        help="wall-clock bound of one alert delivery attempt, s, for sinks without their own "
        "'deadline' (default 30)",
    )
    a("--metrics-port", type=int, help="serve Prometheus metrics on this port (default off)")
    a("--metrics-host", help="address for the metrics endpoint (default 127.0.0.1)")
    a(
        "--wedge-threshold",
        type=float,
        help="with --db-url on PostgreSQL: seconds a session must sit idle in a transaction holding "
        "the scheduler's locks before it can be a dead scheduler's wedge (default 60)",
    )
    a(
        "--heal",
        action="store_const",
        const=True,
        help="terminate (pg_terminate_backend) a session proven to be a dead scheduler's open "
        "transaction blocking the live one; needs --db-url and a role in pg_signal_backend",
    )
    a(
        "--celery-broker-url",
        help="also watch the Celery worker pool through this broker (needs celery, and redis for "
        "Redis): a queue no live worker consumes pages (no password here: use --celery-broker-url-env)",
    )
    a("--celery-broker-url-env", metavar="VAR", help="environment variable holding the broker URL")
    a("--celery-queues", help="comma-separated queues that need a live consumer (default 'default')")
    a(
        "--worker-threshold",
        type=float,
        help="seconds a watched queue may have no live consumer before it pages (default 60)",
    )
    a("--once", action="store_true", help="poll once, deliver, exit 0 if healthy else 1 (for cron)")
    a(
        "--once-deadline",
        type=float,
        help="with --once: the most it waits for alert delivery, every sink and retry together, s "
        "(default 30); what is not delivered by then stays in the outbox for the next run",
    )
    a("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def _env(name: str | None, option: str) -> str | None:
    if not name:
        return None
    value = os.environ.get(name)
    if not value:
        raise ConfigurationError(f"{option} names environment variable {name}, which is not set: export it")
    return value


def _hostname(url: str) -> str | None:
    """The URL's host, or a ConfigurationError naming the malformed URL (e.g. an unclosed ``[::1``)."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).hostname
    except ValueError as exc:
        raise ConfigurationError(
            f"cannot read a host from {safe_db_url(url)!r} ({exc}); fix --api-url / --db-url or set "
            "--instance"
        ) from None


def _build(args: argparse.Namespace) -> Any:
    from airflow_crashsafe.alerting.config import build_sinks
    from airflow_crashsafe.alerting.dispatch import Dispatcher
    from airflow_crashsafe.alerting.outbox import FileOutbox
    from airflow_crashsafe.watchdog.loop import Source, Watchdog
    from airflow_crashsafe.watchdog.metrics import MetricsServer
    from airflow_crashsafe.watchdog.rules import Rules
    from airflow_crashsafe.watchdog.state import StateFile, default_state_dir

    opts, sink_specs = settings(args)
    db_url = opts["db_url"] or _env(opts["db_url_env"], "--db-url-env")
    source: Source
    runs_unreadable = False  # the REST API without credentials cannot list DAG runs
    if db_url:
        from airflow_crashsafe.watchdog.db import DbSource
        from airflow_crashsafe.watchdog.wedge import WedgeWatch

        wedge = WedgeWatch(
            idle_threshold=opts["wedge_threshold"],
            heartbeat_threshold=opts["threshold"],
            heal=bool(opts["heal"]),
        )
        source = DbSource(db_url, timeout=opts["timeout"], canary_dag_id=opts["canary_dag_id"], wedge=wedge)
    else:
        from airflow_crashsafe.watchdog.api import ApiSource

        if opts["heal"]:
            raise ConfigurationError(
                "--heal reads and ends metadata-DB sessions: give --db-url or --db-url-env"
            )
        source = ApiSource(
            opts["api_url"],
            timeout=opts["timeout"],
            token=_env(opts["api_token_env"], "--api-token-env"),
            username=opts["api_user"],
            password=_env(opts["api_password_env"], "--api-password-env"),
            canary_dag_id=opts["canary_dag_id"],
        )
        runs_unreadable = not source.authenticated
    broker_url = opts["celery_broker_url"] or _env(opts["celery_broker_url_env"], "--celery-broker-url-env")
    queues = tuple(q.strip() for q in str(opts["celery_queues"]).split(",") if q.strip())
    if broker_url:
        from airflow_crashsafe.watchdog.celery_workers import CeleryQueues, CelerySource

        if not queues:
            raise ConfigurationError("--celery-queues names no queue: give at least one, e.g. default")
        source = CelerySource(source, CeleryQueues(broker_url, timeout=opts["timeout"]))
    instance = opts["instance"] or _hostname(db_url or opts["api_url"]) or "airflow"
    rules = Rules(
        threshold=opts["threshold"],
        grace=opts["grace"],
        repeat_interval=opts["repeat_interval"],
        expect_triggerer=opts["expect_triggerer"],
        expect_dag_processor=opts["expect_dag_processor"],
        canary_dag_id=opts["canary_dag_id"],
        canary_max_age=opts["canary_max_age"],
        instance=instance,
        celery_queues=queues if broker_url else (),
        worker_threshold=opts["worker_threshold"],
    )
    if opts["api_user"] and not opts["api_password_env"]:
        raise ConfigurationError("--api-user needs --api-password-env VAR (the password is never a flag)")
    given = opts["state_dir"] or os.environ.get("CRASHSAFE_WATCH_STATE_DIR")
    state_dir = Path(given) if given else default_state_dir(instance, source.target)
    log.info("state directory: %s", state_dir)
    legacy = state_dir.parent / "state.json"
    if not given and legacy.exists():
        log.warning(
            "found %s, the shared default of earlier versions: state is now kept per instance; "
            "move that directory's state.json and outbox.jsonl to %s if they belong to this Airflow",
            legacy,
            state_dir,
        )
    if opts["delivery_deadline"] is not None:
        sink_specs = [
            {"deadline": opts["delivery_deadline"], **spec} if isinstance(spec, dict) else spec
            for spec in sink_specs
        ]
    sinks = build_sinks(sink_specs, source=getattr(args, "config", None))
    if not sinks:
        log.warning("no [[sinks]] configured: alerts go to this log only")
    dispatcher = Dispatcher(sinks, outbox=FileOutbox(state_dir / "outbox.jsonl"))
    metrics = None
    if opts["metrics_port"] is not None:
        try:
            metrics = MetricsServer(opts["metrics_host"], int(opts["metrics_port"]))
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve metrics on {opts['metrics_host']}:{opts['metrics_port']}: "
                f"{exc.strerror or exc}; pick a free --metrics-port"
            ) from None
    from airflow_crashsafe.watchdog.deadline_watch import build_deadline_watch

    deadlines = build_deadline_watch(
        getattr(args, "config", None), opts, rules.instance, rules.repeat_interval, state_dir
    )
    if deadlines is not None:
        if runs_unreadable:
            raise ConfigurationError(
                "[[deadlines]] read DAG runs from the REST API, which needs credentials: give "
                "--api-token-env VAR or --api-user with --api-password-env (or read the metadata DB "
                "with --db-url-env)"
            )
        source.runs = deadlines[1]
    watchdog = Watchdog(
        source,
        rules,
        dispatcher,
        StateFile(state_dir / "state.json"),
        metrics=metrics,
        deadlines=deadlines[0] if deadlines else None,
    )
    return watchdog, opts


def run(args: argparse.Namespace) -> int:
    """Run the watchdog until SIGTERM/SIGINT (or one poll with ``--once``)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=getattr(args, "log_level", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        watchdog, opts = _build(args)
    except ConfigurationError as exc:
        print(f"airflow-crashsafe watch: configuration error: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "once", False):
        watchdog.tick(wait=False)  # delivery starts in the background, bounded below as a whole
        if not watchdog.dispatcher.wait(opts["once_deadline"]):
            late = ", ".join(watchdog.dispatcher.busy())
            watchdog.dispatcher.close(1.0)
            print(
                f"airflow-crashsafe watch: delivery to {late} not finished within --once-deadline "
                f"{opts['once_deadline']:g} s; kept in the outbox for the next run",
                file=sys.stderr,
            )
        problems = sorted(watchdog.incidents)
        observation = watchdog.last_observation
        if observation is not None and observation.error:
            print(f"airflow-crashsafe watch: {observation.error}", file=sys.stderr)
        if problems:
            print(f"problems: {', '.join(problems)}", file=sys.stderr)
        return 1 if problems else 0
    stop = threading.Event()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    if watchdog.metrics is not None:
        watchdog.metrics.start()
    try:
        watchdog.run(stop, opts["interval"])
    finally:
        if watchdog.metrics is not None:
            watchdog.metrics.stop()
        for number, handler in previous.items():
            signal.signal(number, handler)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m airflow_crashsafe.watchdog.cli``: the same command without the console script."""
    parser = argparse.ArgumentParser(prog="airflow-crashsafe watch", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
