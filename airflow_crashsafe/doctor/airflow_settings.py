"""Airflow's own settings, as the doctor reads them: ``airflow.configuration.conf``, env included.

Only Airflow's sections are read here (``[core]``, ``[database]``, ``[scheduler]``, ``[celery]``
...); ``[crashsafe]`` options, and ``[core] executor`` (which the store reads too), are read
through :mod:`airflow_crashsafe.config`. Airflow is
imported on first use, so ``airflow-crashsafe --help`` stays fast.
"""

from __future__ import annotations

from airflow_crashsafe.config import SINGLE_HOST_EXECUTORS
from airflow_crashsafe.config import executor_names as executors
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["SINGLE_HOST_EXECUTORS", "executors", "flag", "metadata_url", "number", "option"]


def option(section: str, key: str, fallback: str | None = None) -> str | None:
    """``[section] key`` from Airflow's configuration (``AIRFLOW__SECTION__KEY`` first)."""
    from airflow.configuration import conf

    value = conf.get(section, key, fallback=fallback)
    return None if value is None else str(value)


def number(section: str, key: str, fallback: float) -> float:
    """A numeric option; a value that is not a number is a configuration error naming it."""
    raw = option(section, key)
    if raw is None or not raw.strip():
        return fallback
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(
            f"[{section}] {key} = {raw!r} is not a number: fix it (or AIRFLOW__{section.upper()}__"
            f"{key.upper()})"
        ) from None


def flag(section: str, key: str, fallback: bool) -> bool:
    """A boolean option, read as Airflow reads it (``False``/``0``/``no``/``off`` are false)."""
    raw = option(section, key)
    if raw is None or not raw.strip():
        return fallback
    return raw.strip().lower() not in {"false", "0", "no", "off", "f"}


def metadata_url() -> str:
    """Airflow's metadata database URL, ``[database] sql_alchemy_conn``."""
    url = option("database", "sql_alchemy_conn")
    if not url:
        raise ConfigurationError("[database] sql_alchemy_conn is not set: point it at Airflow's metadata DB")
    return url
