"""Provider metadata for Airflow's providers manager (entry point ``apache_airflow_provider``).

Kept import-light on purpose: Airflow calls this in every component, so it imports only the
static option table from :mod:`airflow_crashsafe.config` and nothing that touches Airflow. The hook
is named by its import path; Airflow imports it only when a ``crashsafe`` connection is used.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_crashsafe.config import OPTIONS

__all__ = ["PACKAGE_NAME", "VERSION", "get_provider_info"]

PACKAGE_NAME = "airflow-crashsafe"
#: Keep in step with ``version`` in pyproject.toml (a packaging test checks it).
VERSION = "0.1.0"
INTEGRATION = "Crashsafe"
DOCS_URL = "https://github.com/airflow-crashsafe/airflow-crashsafe/blob/main/docs/design.md"
OPERATOR_MODULES = (
    "airflow_crashsafe.operators.sql",
    "airflow_crashsafe.operators.http",
    "airflow_crashsafe.operators.delta",
)
SENSOR_MODULES = ("airflow_crashsafe.sensors.heartbeat",)
TRIGGER_MODULES = ("airflow_crashsafe.triggers.unit", "airflow_crashsafe.triggers.admission")


def get_provider_info() -> dict[str, Any]:
    """Describe the provider and its ``[crashsafe]`` configuration section."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "Crashsafe",
        "description": "Crash-safe task execution for Airflow 3: fenced writes, natural-key merges, "
        "idempotent external calls and an audit trail of every attempt.",
        "versions": [VERSION],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": DOCS_URL,
                "how-to-guide": [f"{DOCS_URL}#where-to-start-reading"],
                "tags": ["software"],
            }
        ],
        # Everything below is named by import path (a test imports each and checks its kind).
        "operators": [{"integration-name": INTEGRATION, "python-modules": list(OPERATOR_MODULES)}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": list(SENSOR_MODULES)}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": list(TRIGGER_MODULES)}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["airflow_crashsafe.hooks.crashsafe"]}],
        "connection-types": [
            {
                "hook-class-name": "airflow_crashsafe.hooks.crashsafe.CrashsafeHook",
                "hook-name": "Crashsafe store",
                "connection-type": "crashsafe",
                # A crashsafe connection is a PostgreSQL one: the same fields, "schema" is the database.
                "ui-field-behaviour": {"relabeling": {"schema": "Database"}},
            }
        ],
        # Airflow 3.2+: `airflow crashsafe ...` beside the standalone `airflow-crashsafe`.
        "cli": ["airflow_crashsafe.cli.airflow_commands.get_cli_commands"],
        "config": {
            "crashsafe": {
                "description": "Options of airflow-crashsafe.",
                "options": copy.deepcopy(OPTIONS),
            }
        },
    }
