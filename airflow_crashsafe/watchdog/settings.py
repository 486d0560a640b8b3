"""The watchdog's settings, declared once: each option's default and, for a number, its limits.

:func:`settings` merges the ``watch`` flags over the ``[watch]`` table of ``--config`` (TOML or
JSON, same names with underscores) over :data:`DEFAULTS`, and checks every number against its
:class:`~airflow_crashsafe.limits.Limit` once, naming the flag or the file and table it came from:
a nan grace, an infinite threshold or a nan interval would silence the watchdog without a word.
The UI's Runs at risk page reads the ``deadline_*`` numbers of the same file through
:func:`watch_number`, with the same limits.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.limits import DAY, HOUR, YEAR, Limit

__all__ = ["DEFAULTS", "LIMITS", "settings", "watch_number"]

DEFAULTS: dict[str, Any] = {
    "api_url": "http://localhost:8080",
    "db_url": None,
    "db_url_env": None,
    "interval": 10.0,
    "threshold": 30.0,
    # The heartbeat threshold already absorbs a quick restart; a default grace on top of it would
    # delay a dead scheduler's page to threshold + grace + poll (70 s with 30 s each).
    "grace": 0.0,
    "repeat_interval": 3600.0,
    "expect_triggerer": "auto",
    "expect_dag_processor": "auto",
    "canary_dag_id": None,
    "canary_max_age": None,
    "api_token_env": None,
    "api_user": None,
    "api_password_env": None,
    "state_dir": None,
    "instance": None,
    "timeout": 5.0,
    "metrics_port": None,
    "metrics_host": "127.0.0.1",
    # A dead scheduler's open transaction (see watchdog/wedge.py): idle this long to be judged.
    "wedge_threshold": 60.0,
    "heal": False,
    "delivery_deadline": None,
    # --once: the most it waits for deliveries, all sinks and retries together (a cron slot).
    "once_deadline": 30.0,
    # The Celery worker pool (see watchdog/celery_workers.py): off unless a broker URL is given.
    "celery_broker_url": None,
    "celery_broker_url_env": None,
    "celery_queues": "default",
    "worker_threshold": 60.0,
    # [[deadlines]] (see watchdog/deadline_watch.py): a directory the replicas share to send each
    # deadline alert once, how long a past deadline is watched, a task's duration with no history,
    # how many successful tries make its median, how often dependencies and durations are re-read,
    # and whether to page Airflow's own DeadlineAlerts too (true, or the severity of their pages).
    "watch_airflow_deadlines": False,
    "deadline_claim_dir": None,
    "deadline_keep": 86400.0,
    "deadline_default_duration": 300.0,
    "deadline_history": 10,
    "deadline_refresh": 600.0,
}

#: The numeric options and what each may be. Judging times (threshold, grace, the wedge's and the
#: worker pool's thresholds) stop at a day: beyond it a dead component is as good as never judged.
LIMITS: dict[str, Limit] = {
    "interval": Limit(0, DAY, above=True),
    "threshold": Limit(0, DAY, above=True),
    "grace": Limit(0, DAY),
    "repeat_interval": Limit(0, 30 * DAY),  # 0: never repeat
    "canary_max_age": Limit(0, YEAR, above=True),
    "timeout": Limit(0, HOUR, above=True),
    "wedge_threshold": Limit(0, DAY, above=True),
    "delivery_deadline": Limit(0, HOUR, above=True),
    "once_deadline": Limit(0, HOUR, above=True),
    "worker_threshold": Limit(0, DAY, above=True),
    "metrics_port": Limit(0, 65535, integer=True, unit=""),  # 0: any free port
    "deadline_keep": Limit(0, YEAR, above=True),
    "deadline_default_duration": Limit(0, 30 * DAY, above=True),
    "deadline_history": Limit(1, 1000, integer=True, unit="successful tries"),
    "deadline_refresh": Limit(0, DAY, above=True),
}


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def watch_number(key: str, value: object, where: str) -> float:
    """``value`` of numeric option ``key`` checked against its limit; ``where`` names its origin."""
    limit = LIMITS[key]
    example = DEFAULTS[key] if DEFAULTS[key] is not None else None
    if limit.integer:
        return limit.check_int(value, where, example=example)
    return limit.check(value, where, example=example)


def settings(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Merge flags over the config file over defaults; return (settings, sink specs)."""
    config = getattr(args, "config", None)
    file_data: dict[str, Any] = {}
    if config:
        from airflow_crashsafe.alerting.config import load_config_file

        file_data = load_config_file(config)
        unknown = sorted(set(file_data) - {"watch", "sinks", "deadlines"})
        if unknown:
            raise ConfigurationError(
                f"{config}: unknown top-level key(s) {unknown}; use [watch], [[sinks]] and [[deadlines]]"
            )
    watch = file_data.get("watch", {})
    if not isinstance(watch, Mapping):
        raise ConfigurationError(f"{config}: 'watch' must be a table")
    unknown = sorted(set(watch) - set(DEFAULTS))
    if unknown:
        raise ConfigurationError(f"{config}: unknown [watch] option(s) {unknown}; known: {sorted(DEFAULTS)}")
    flags = {k: v for k, v in vars(args).items() if k in DEFAULTS and v is not None}
    merged = {**DEFAULTS, **watch, **flags}
    for key in LIMITS:  # the defaults are in range (a test checks them)
        if key in flags:
            merged[key] = watch_number(key, flags[key], _flag(key))
        elif watch.get(key) is not None:
            merged[key] = watch_number(key, watch[key], f"{config}: [watch] {key}")
    return merged, list(file_data.get("sinks", []))
