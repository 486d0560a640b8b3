"""Provider metadata for Airflow's providers manager (entry point ``apache_airflow_provider``).

Kept import-light on purpose: Airflow calls this in every component, so it imports only the
static option table from :mod:`airflow_crashsafe.config` and nothing that touches Airflow.
"""

from __future__ import annotations

import copy
from typing import Any

from airflow_crashsafe.config import OPTIONS

__all__ = ["PACKAGE_NAME", "VERSION", "get_provider_info"]

PACKAGE_NAME = "airflow-crashsafe"
#: Keep in step with ``version`` in pyproject.toml (a packaging test checks it).
VERSION = "0.1.0"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider and its ``[crashsafe]`` configuration section."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "Crashsafe",
        "description": "Crash-safe task execution for Airflow 3: fenced writes, natural-key merges, "
        "idempotent external calls and an audit trail of every attempt.",
        "versions": [VERSION],
        "config": {
            "crashsafe": {
                "description": "Options of airflow-crashsafe.",
                "options": copy.deepcopy(OPTIONS),
            }
        },
    }
