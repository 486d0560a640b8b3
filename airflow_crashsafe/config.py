"""Small cached accessors for the ``[crashsafe]`` options, one per option.

Every ``[crashsafe]`` option is read here and nowhere else. Nothing is read at import time: each
accessor reads Airflow's configuration on first call and caches it for the life of the process
(``reset_cache()`` drops it, for tests). Every option can also be set as
``AIRFLOW__CRASHSAFE__<OPTION>``. A value that cannot work raises
:class:`~airflow_crashsafe.errors.ConfigurationError` naming the option and the fix; a number is
checked against its range in :data:`~airflow_crashsafe.options.LIMITS` (nan and inf refused).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.options import LIMITS, OPTIONS

__all__ = [
    "DEFAULT_API_URL",
    "OPTIONS",
    "POLICY_MODES",
    "SINGLE_HOST_EXECUTORS",
    "adopt_in_flight",
    "adoption_timeout_seconds",
    "adoption_without_triggerer",
    "alert_notifiers",
    "alerting_config",
    "alerting_instance",
    "alerting_state_dir",
    "allow_embedded_store_on_fleet",
    "api_conn_id",
    "api_url",
    "audit_beacon_seconds",
    "audit_enabled",
    "audit_retention_days",
    "audit_timeout_seconds",
    "dead_mans_switch_url",
    "deadlines_config",
    "embedded_store_path",
    "executor_names",
    "in_flight_wait_seconds",
    "ledger_retention_days",
    "ledger_spin_wait_ms",
    "multi_host_executors",
    "on_kill_unit",
    "policy_mode",
    "recovery_concurrency",
    "recovery_lease_seconds",
    "recovery_wait_seconds",
    "reset_cache",
    "store_conn_id",
    "store_connect_timeout_seconds",
    "store_statement_timeout_seconds",
    "triggerer_answer_seconds",
]

#: Executors that run every task on the scheduler's own host (``airflow standalone`` uses LocalExecutor).
SINGLE_HOST_EXECUTORS = frozenset({"LocalExecutor", "SequentialExecutor", "DebugExecutor"})

#: Where the api-server is when nothing says otherwise.
DEFAULT_API_URL = "http://localhost:8080"


def _get(option: str) -> str:
    """The option through Airflow's own configuration (airflow.cfg, env, and for a ``sensitive``
    option ``_CMD`` / ``_SECRET``), stripped: a command's output ends with a newline."""
    env = os.environ.get(f"AIRFLOW__CRASHSAFE__{option.upper()}")
    if env is not None:
        return env.strip()
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # pragma: no cover - only without Airflow (the watchdog never calls this)
        return str(OPTIONS[option]["default"])
    value = conf.get("crashsafe", option, fallback=OPTIONS[option]["default"])
    return str(OPTIONS[option]["default"] if value is None else value).strip()


def _number(option: str) -> float:
    """A numeric option, checked against its :data:`~airflow_crashsafe.options.LIMITS` entry."""
    raw = _get(option)
    env = f"AIRFLOW__CRASHSAFE__{option.upper()}"
    set_it = env if env in os.environ else f"it in airflow.cfg (or {env})"
    example = OPTIONS[option]["example"]
    return LIMITS[option].check(raw, f"[crashsafe] {option}", example=example, set_it=set_it)


def _whole(option: str) -> int:
    return int(_number(option))


@functools.cache
def store_conn_id() -> str:
    """Airflow connection id of the crashsafe store."""
    return _get("conn_id")


def _under_airflow_home(option: str, name: str) -> Path:
    """The path an option names, else ``$AIRFLOW_HOME/<name>`` (``~/airflow`` without it)."""
    configured = _get(option)
    if configured:
        return Path(configured).expanduser()
    home = os.environ.get("AIRFLOW_HOME") or str(Path("~/airflow").expanduser())
    return Path(home) / name


@functools.cache
def embedded_store_path() -> Path:
    """Where the embedded SQLite store lives when no store connection exists."""
    return _under_airflow_home("embedded_path", "crashsafe.db")


@functools.cache
def allow_embedded_store_on_fleet() -> bool:
    """Whether the embedded store may serve although the executor can run tasks on several hosts."""
    return _truthy(_get("allow_embedded_store_on_fleet"))


@functools.cache
def store_connect_timeout_seconds() -> float:
    """The most opening a store connection may take, in seconds."""
    return _number("store_connect_timeout_seconds")


@functools.cache
def store_statement_timeout_seconds() -> float:
    """The most one store statement may take, in seconds."""
    return _number("store_statement_timeout_seconds")


@functools.cache
def audit_retention_days() -> int:
    """Days ``db prune`` keeps attempts, events, finished units and fence rows (0: forever)."""
    return _whole("audit_retention_days")


def executor_names() -> list[str]:
    """The class names in Airflow's ``[core] executor`` (``alias:module.Class`` and lists accepted).

    Not cached: the doctor and the store read it once per use, and tests change it.
    """
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # pragma: no cover - only without Airflow (the watchdog never calls this)
        return ["LocalExecutor"]
    raw = conf.get("core", "executor", fallback=None) or ""
    names = [entry.strip().rsplit(":", 1)[-1].rsplit(".", 1)[-1] for entry in str(raw).split(",")]
    return [name for name in names if name] or ["LocalExecutor"]


def multi_host_executors() -> list[str]:
    """The configured executors that may run tasks on another host than this one.

    Every executor but the known single-host ones counts (CeleryExecutor, KubernetesExecutor,
    EdgeExecutor, and any executor class crashsafe does not know): on those, per-host state splits.
    """
    return [name for name in executor_names() if name not in SINGLE_HOST_EXECUTORS]


@functools.cache
def ledger_retention_days() -> int:
    """Days an idempotency-ledger entry is kept."""
    return _whole("ledger_retention_days")


@functools.cache
def in_flight_wait_seconds() -> float:
    """The most a new attempt waits for an older attempt's in-flight call, in seconds."""
    return _number("in_flight_wait_seconds")


@functools.cache
def ledger_spin_wait_ms() -> float:
    """How long a ledger statement's answer is awaited on the CPU before sleeping, in ms."""
    return _number("ledger_spin_wait_ms")


@functools.cache
def adopt_in_flight() -> bool:
    """Whether re-runs adopt a predecessor's in-flight unit by default."""
    return _truthy(_get("adopt_in_flight"))


@functools.cache
def adoption_timeout_seconds() -> float:
    """Default wait for an in-flight unit before taking over, in seconds."""
    return _number("adoption_timeout_seconds")


@functools.cache
def adoption_without_triggerer() -> str:
    """Default for a re-run finding an in-flight unit with no triggerer: "wait" or "take_over"."""
    value = _get("adoption_without_triggerer").strip().lower()
    if value not in {"wait", "take_over"}:
        raise ConfigurationError(
            f"[crashsafe] adoption_without_triggerer = {value!r}: set it to 'wait' or 'take_over'."
        )
    return value


@functools.cache
def triggerer_answer_seconds() -> float:
    """How often a deferred re-run's trigger checks in; twice this unanswered means a stalled triggerer."""
    return _number("triggerer_answer_seconds")


@functools.cache
def on_kill_unit() -> str:
    """Default ``on_kill`` policy for a running unit: "leave" or "cancel"."""
    value = _get("on_kill_unit").strip().lower()
    if value not in {"leave", "cancel"}:
        raise ConfigurationError(f"[crashsafe] on_kill_unit = {value!r}: set it to 'leave' or 'cancel'.")
    return value


#: The cluster policy's modes, from doing nothing to protecting what it can.
POLICY_MODES = ("off", "warn", "enforce", "protect")


@functools.cache
def policy_mode() -> str:
    """The cluster policy's mode: "off" (default), "warn", "enforce" or "protect"."""
    value = _get("policy_mode").strip().lower() or "off"
    if value not in POLICY_MODES:
        raise ConfigurationError(
            f"[crashsafe] policy_mode = {value!r}: set it to one of {', '.join(POLICY_MODES)} (docs/scan.md)."
        )
    return value


@functools.cache
def recovery_concurrency() -> int:
    """Default recovery budget per resource (0: admission off)."""
    return _whole("recovery_concurrency")


@functools.cache
def recovery_lease_seconds() -> float:
    """How long a recovery place outlives its holder's last beacon, in seconds."""
    return _number("recovery_lease_seconds")


@functools.cache
def recovery_wait_seconds() -> float:
    """The most a recovery re-run waits for a place, in seconds."""
    return _number("recovery_wait_seconds")


def _truthy(value: str) -> bool:
    return value.strip().lower() not in {"false", "0", "no", "off"}


@functools.cache
def audit_enabled() -> bool:
    """Whether the audit listener records attempts."""
    return _truthy(_get("audit_enabled"))


@functools.cache
def audit_timeout_seconds() -> float:
    """The most an audit event may delay a task, in seconds."""
    return _number("audit_timeout_seconds")


@functools.cache
def audit_beacon_seconds() -> float:
    """Interval of a running attempt's last-seen refresh, in seconds."""
    return _number("audit_beacon_seconds")


@functools.cache
def api_conn_id() -> str:
    """HTTP connection to Airflow's REST API, for the alerting DAG's checks."""
    return _get("api_conn_id")


@functools.cache
def dead_mans_switch_url() -> str | None:
    """URL the alerting DAG pings every run; None when not configured."""
    return _get("dead_mans_switch_url") or None


@functools.cache
def alerting_config() -> str | None:
    """The TOML/JSON file of the alerting DAG's sinks; None when not configured."""
    return _get("alerting_config") or None


@functools.cache
def deadlines_config() -> str | None:
    """The TOML/JSON file whose ``[[deadlines]]`` the UI's Runs at risk page shows; None: not set."""
    return _get("deadlines_config") or None


@functools.cache
def alert_notifiers() -> str | None:
    """JSON list of the Notifiers the alerting DAG alerts through; None when not configured."""
    return _get("alert_notifiers") or None


@functools.cache
def alerting_state_dir() -> Path:
    """Where the alerting DAG keeps its incidents and outbox."""
    return _under_airflow_home("alerting_state_dir", "crashsafe-alerting")


@functools.cache
def alerting_instance() -> str | None:
    """This Airflow's name in the alerting DAG's alerts; None: derive it from the API host."""
    return _get("alerting_instance") or None


def _absolute(url: str | None) -> str | None:
    url = (url or "").strip()
    return url.rstrip("/") if url.startswith(("http://", "https://")) else None


def _http_root(url: str, what: str) -> str:
    root = _absolute(url)
    if root is None:
        raise ConfigurationError(
            f"{what} must start with http:// or https://, got {url!r}: give the api-server's root "
            "URL as workers reach it, e.g. http://airflow-api:8080"
        )
    return root


@functools.cache
def _configured_api_url() -> str:
    """``[crashsafe] api_url``, else the execution API's root, else ``[api] base_url``, else default.

    A worker already knows how to reach the api-server: the executor hands it ``[core]
    execution_api_server_url`` (default ``{[api] base_url}/execution/``), so its root is the best
    guess when ``api_url`` is not set.
    """
    configured = _get("api_url")
    if configured:
        return _http_root(configured, "[crashsafe] api_url")
    from airflow.sdk.configuration import conf

    execution = _absolute(conf.get("core", "execution_api_server_url", fallback=None))
    if execution:
        return execution.removesuffix("/execution")
    return _absolute(conf.get("api", "base_url", fallback=None)) or DEFAULT_API_URL


def api_url(explicit: str | None = None) -> str:
    """The api-server's root URL: ``explicit`` (an operator argument), else ``[crashsafe] api_url``,
    else the root of ``[core] execution_api_server_url``, else ``[api] base_url``, else
    :data:`DEFAULT_API_URL`."""
    if explicit:
        return _http_root(explicit, "api_url")
    return _configured_api_url()


def reset_cache() -> None:
    """Forget cached option values (tests change the environment between cases)."""
    for accessor in (
        store_conn_id,
        embedded_store_path,
        allow_embedded_store_on_fleet,
        store_connect_timeout_seconds,
        store_statement_timeout_seconds,
        audit_retention_days,
        ledger_retention_days,
        in_flight_wait_seconds,
        ledger_spin_wait_ms,
        adopt_in_flight,
        adoption_timeout_seconds,
        adoption_without_triggerer,
        triggerer_answer_seconds,
        on_kill_unit,
        policy_mode,
        recovery_concurrency,
        recovery_lease_seconds,
        recovery_wait_seconds,
        audit_enabled,
        audit_timeout_seconds,
        audit_beacon_seconds,
        api_conn_id,
        dead_mans_switch_url,
        alerting_config,
        deadlines_config,
        alert_notifiers,
        alerting_state_dir,
        alerting_instance,
        _configured_api_url,
    ):
        accessor.cache_clear()
