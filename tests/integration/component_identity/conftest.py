"""Fixtures: a real Airflow metadata database (shared with the watchdog's integration tests)."""

from __future__ import annotations

from tests.integration.watchdog.wedging import airflow_schema, metadata_db

__all__ = ["airflow_schema", "metadata_db"]
