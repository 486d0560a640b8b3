"""Where a task finds the api-server, and the ``[crashsafe]`` options the heartbeat code reads.

Tasks cannot use the ORM, so component health comes from the api-server's unauthenticated
``/api/v2/monitor/health``. A worker already knows how to reach the api-server: the executor
hands it ``[core] execution_api_server_url`` (default ``{[api] base_url}/execution/``, see
``airflow.executors.base_executor.get_execution_api_server_url``), so its root is the best guess.

The options read here are declared in :data:`airflow_crashsafe.config.OPTIONS`; :func:`option`
reads one with the default given by the caller. Nothing is read at import time.
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_API_URL", "api_url", "option"]

DEFAULT_API_URL = "http://localhost:8080"
_EXECUTION_SUFFIX = "/execution"


def option(name: str, default: str) -> str:
    """``AIRFLOW__CRASHSAFE__<NAME>``, else ``[crashsafe] <name>``, else ``default``."""
    env = os.environ.get(f"AIRFLOW__CRASHSAFE__{name.upper()}")
    if env is not None:
        return env
    from airflow.sdk.configuration import conf

    value = conf.get("crashsafe", name, fallback=default)
    return default if value is None else str(value)


def _absolute(url: str | None) -> str | None:
    url = (url or "").strip()
    return url.rstrip("/") if url.startswith(("http://", "https://")) else None


def api_url(explicit: str | None = None) -> str:
    """The api-server root: ``explicit``, ``[crashsafe] api_url``, the execution API's root,
    ``[api] base_url``, else ``http://localhost:8080``."""
    from airflow.sdk.configuration import conf

    if explicit:
        chosen = _absolute(explicit)
        if chosen is None:
            raise ValueError(f"api_url must start with http:// or https://, got {explicit!r}")
        return chosen
    configured = option("api_url", "")
    if configured:
        chosen = _absolute(configured)
        if chosen is None:
            raise ValueError(f"[crashsafe] api_url must start with http:// or https://, got {configured!r}")
        return chosen
    execution = _absolute(conf.get("core", "execution_api_server_url", fallback=None))
    if execution:
        return execution[: -len(_EXECUTION_SUFFIX)] if execution.endswith(_EXECUTION_SUFFIX) else execution
    return _absolute(conf.get("api", "base_url", fallback=None)) or DEFAULT_API_URL
