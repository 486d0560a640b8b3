"""Small cached accessors for the ``[crashsafe]`` options, one per option.

Every ``[crashsafe]`` option is read here and nowhere else. Nothing is read at import time: each
accessor reads Airflow's configuration on first call and caches it for the life of the process
(``reset_cache()`` drops it, for tests). Every option can also be set as
``AIRFLOW__CRASHSAFE__<OPTION>``. A value that cannot work raises
:class:`~airflow_crashsafe.errors.ConfigurationError` naming the option and the fix.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "DEFAULT_API_URL",
    "OPTIONS",
    "adopt_in_flight",
    "adoption_timeout_seconds",
    "alerting_config",
    "alerting_instance",
    "alerting_state_dir",
    "api_conn_id",
    "api_url",
    "audit_beacon_seconds",
    "audit_enabled",
    "audit_timeout_seconds",
    "dead_mans_switch_url",
    "embedded_store_path",
    "in_flight_wait_seconds",
    "ledger_retention_days",
    "ledger_spin_wait_ms",
    "on_kill_unit",
    "reset_cache",
    "store_conn_id",
]

#: Where the api-server is when nothing says otherwise.
DEFAULT_API_URL = "http://localhost:8080"

#: Options declared in provider info (``config`` section) and read here. Keep the two in step.
OPTIONS: dict[str, dict[str, str | None]] = {
    "conn_id": {
        "description": "Airflow connection of the crashsafe store (PostgreSQL in production). When "
        "no such connection exists, an embedded SQLite file under $AIRFLOW_HOME is used instead "
        "(single machine only).",
        "type": "string",
        "example": "crashsafe_default",
        "default": "crashsafe_default",
        "version_added": "0.1.0",
    },
    "embedded_path": {
        "description": "Path of the embedded SQLite store used when the store connection does not "
        "exist. Empty means $AIRFLOW_HOME/crashsafe.db.",
        "type": "string",
        "example": "/opt/airflow/crashsafe.db",
        "default": "",
        "version_added": "0.1.0",
    },
    "ledger_retention_days": {
        "description": "How many days idempotency-ledger entries are kept; `airflow-crashsafe "
        "ledger prune` deletes older ones, with their calls' fence rows. A retry later than this "
        "re-sends its call.",
        "type": "integer",
        "example": "30",
        "default": "30",
        "version_added": "0.1.0",
    },
    "in_flight_wait_seconds": {
        "description": "How long a new attempt waits for an older attempt's external call that the "
        "ledger shows still in flight (intent recorded, no outcome yet), to adopt its result instead "
        "of treating the outcome as unknown. Airflow kills a reset attempt within about 10 s.",
        "type": "float",
        "example": "15",
        "default": "15",
        "version_added": "0.1.0",
    },
    "ledger_spin_wait_ms": {
        "description": "How long a process waits on the CPU for the store's answer to one of the "
        "ledger's two per-call statements before it sleeps. A local store answers well within it, and "
        "on virtual machines a CPU that went idle runs slower for a while after. 0 always sleeps.",
        "type": "float",
        "example": "0",
        "default": "2",
        "version_added": "0.1.0",
    },
    "adopt_in_flight": {
        "description": "Whether a crashsafe SQL write that finds its predecessor's unit still running "
        "server-side (PostgreSQL) waits for it in the triggerer and adopts its commit instead of "
        "cancelling it and redoing the work. Operators' adopt_in_flight argument overrides it.",
        "type": "boolean",
        "example": "True",
        "default": "True",
        "version_added": "0.1.0",
    },
    "adoption_timeout_seconds": {
        "description": "How long a re-run waits for its predecessor's in-flight unit before cancelling "
        "it and taking the slot over. Operators' adoption_timeout argument overrides it.",
        "type": "float",
        "example": "21600",
        "default": "21600",
        "version_added": "0.1.0",
    },
    "on_kill_unit": {
        "description": "What on_kill does to a crashsafe SQL write running server-side: leave (it "
        "commits if still the newest attempt, and a re-run adopts it) or cancel. Operators' "
        "on_kill_unit argument overrides it.",
        "type": "string",
        "example": "leave",
        "default": "leave",
        "version_added": "0.1.0",
    },
    "audit_enabled": {
        "description": "Whether the listener records every attempt's start and end in the store.",
        "type": "boolean",
        "example": "True",
        "default": "True",
        "version_added": "0.1.0",
    },
    "audit_timeout_seconds": {
        "description": "The most an audit event may delay a task; a slower store gets the event "
        "spooled locally under $AIRFLOW_HOME/crashsafe-spool and delivered later.",
        "type": "float",
        "example": "0.5",
        "default": "0.5",
        "version_added": "0.1.0",
    },
    "audit_beacon_seconds": {
        "description": "How often a running attempt refreshes its last-seen time, so an attempt "
        "killed without any hook still shows how long it really ran.",
        "type": "float",
        "example": "5",
        "default": "5",
        "version_added": "0.1.0",
    },
    "api_url": {
        "description": "Root URL of the api-server as workers reach it, for the heartbeat sensor and the "
        "alerting DAG. Empty: the root of [core] execution_api_server_url, else [api] base_url, "
        "else http://localhost:8080.",
        "type": "string",
        "example": "http://airflow-api:8080",
        "default": "",
        "version_added": "0.1.0",
    },
    "api_conn_id": {
        "description": "HTTP connection to Airflow's REST API (host, login/password or extra "
        '{"token": ...}) used by the alerting DAG for stuck tasks, audit reconciliation and HA '
        "replicas; without it those checks are skipped with a warning.",
        "type": "string",
        "example": "crashsafe_api",
        "default": "crashsafe_api",
        "version_added": "0.1.0",
    },
    "dead_mans_switch_url": {
        "description": "URL the alerting DAG pings every run (healthchecks.io etc.); the external "
        "monitor pages when the pings stop, even when all of Airflow is down.",
        "type": "string",
        "example": "https://hc-ping.com/<uuid>",
        "default": "",
        "version_added": "0.1.0",
    },
    "alerting_config": {
        "description": "TOML/JSON file with [[sinks]] (the watchdog's format) through which the alerting DAG "
        "alerts.",
        "type": "string",
        "example": "/etc/crashsafe/alerting.toml",
        "default": "",
        "version_added": "0.1.0",
    },
    "alerting_state_dir": {
        "description": "Where the alerting DAG keeps incidents and its alert outbox. Empty means "
        "$AIRFLOW_HOME/crashsafe-alerting.",
        "type": "string",
        "example": "/var/lib/crashsafe",
        "default": "",
        "version_added": "0.1.0",
    },
    "alerting_instance": {
        "description": "Name of this Airflow in the alerting DAG's alerts. Empty means <api host>/<dag_id>.",
        "type": "string",
        "example": "prod-eu",
        "default": "",
        "version_added": "0.1.0",
    },
}


def _get(option: str) -> str:
    env = os.environ.get(f"AIRFLOW__CRASHSAFE__{option.upper()}")
    if env is not None:
        return env
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # pragma: no cover - only without Airflow (the watchdog never calls this)
        return str(OPTIONS[option]["default"])
    return str(conf.get("crashsafe", option, fallback=OPTIONS[option]["default"]))


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
def ledger_retention_days() -> int:
    """Days an idempotency-ledger entry is kept."""
    return int(_get("ledger_retention_days"))


@functools.cache
def in_flight_wait_seconds() -> float:
    """The most a new attempt waits for an older attempt's in-flight call, in seconds."""
    return float(_get("in_flight_wait_seconds"))


@functools.cache
def ledger_spin_wait_ms() -> float:
    """How long a ledger statement's answer is awaited on the CPU before sleeping, in ms."""
    return max(0.0, float(_get("ledger_spin_wait_ms")))


@functools.cache
def adopt_in_flight() -> bool:
    """Whether re-runs adopt a predecessor's in-flight unit by default."""
    return _truthy(_get("adopt_in_flight"))


@functools.cache
def adoption_timeout_seconds() -> float:
    """Default wait for an in-flight unit before taking over, in seconds."""
    return float(_get("adoption_timeout_seconds"))


@functools.cache
def on_kill_unit() -> str:
    """Default ``on_kill`` policy for a running unit: "leave" or "cancel"."""
    value = _get("on_kill_unit").strip().lower()
    if value not in {"leave", "cancel"}:
        raise ConfigurationError(f"[crashsafe] on_kill_unit = {value!r}: set it to 'leave' or 'cancel'.")
    return value


def _truthy(value: str) -> bool:
    return value.strip().lower() not in {"false", "0", "no", "off"}


@functools.cache
def audit_enabled() -> bool:
    """Whether the audit listener records attempts."""
    return _truthy(_get("audit_enabled"))


@functools.cache
def audit_timeout_seconds() -> float:
    """The most an audit event may delay a task, in seconds."""
    return float(_get("audit_timeout_seconds"))


@functools.cache
def audit_beacon_seconds() -> float:
    """Interval of a running attempt's last-seen refresh, in seconds."""
    return float(_get("audit_beacon_seconds"))


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
        ledger_retention_days,
        in_flight_wait_seconds,
        ledger_spin_wait_ms,
        adopt_in_flight,
        adoption_timeout_seconds,
        on_kill_unit,
        audit_enabled,
        audit_timeout_seconds,
        audit_beacon_seconds,
        api_conn_id,
        dead_mans_switch_url,
        alerting_config,
        alerting_state_dir,
        alerting_instance,
        _configured_api_url,
    ):
        accessor.cache_clear()
