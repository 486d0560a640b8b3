"""The audit: who ran each slot, when, and which re-runs were risky (ARCHITECTURE decision 9).

``replay_safe(task)`` declares a task safe to run twice. The listener module
(:mod:`airflow_crashsafe.audit.listener`) is registered by the plugin; importing this package does
no work and imports no Airflow.
"""

from __future__ import annotations

from airflow_crashsafe.audit.protection import replay_safe

__all__ = ["replay_safe"]
