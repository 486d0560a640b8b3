"""The Airflow plugin (entry point ``airflow.plugins``).

Airflow imports this module in every component, so it does no work at import time: no database,
no configuration read. Listeners and the FastAPI app are attached here as they are built.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_crashsafe.audit import listener as audit_listener
from airflow_crashsafe.component_identity import listener as identity_listener
from airflow_crashsafe.macros import MACROS
from airflow_crashsafe.ui import EXTERNAL_VIEWS, FASTAPI_APPS

__all__ = ["CrashsafePlugin"]


class CrashsafePlugin(AirflowPlugin):
    """Registers airflow-crashsafe with Airflow; registered once, through the entry point only."""

    name = "crashsafe"
    #: ``{{ macros.crashsafe.idempotency_key('payouts') }}`` in templated fields.
    macros = MACROS
    #: Records every attempt's start and end in the crashsafe store (the duplicate-run audit), and
    #: names each scheduler's, triggerer's and dag-processor's metadata sessions after it (the
    #: identity the watchdog's --heal proves a dead scheduler's session by).
    listeners = [audit_listener, identity_listener]  # noqa: RUF012 - AirflowPlugin declares it as a plain attribute
    #: The UI at /crashsafe; a lazy ASGI app, built on its first request (only the api-server serves).
    fastapi_apps = FASTAPI_APPS
    #: "Crash safety" in Airflow's navigation, and an "Attempts" tab on the task-instance page.
    external_views = EXTERNAL_VIEWS
