"""Airflow hooks of airflow-crashsafe."""

from __future__ import annotations

from airflow_crashsafe.hooks.crashsafe import CrashsafeHook

__all__ = ["CrashsafeHook"]
