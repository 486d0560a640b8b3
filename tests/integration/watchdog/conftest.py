"""Fixtures of the watchdog's integration tests: a real Airflow metadata DB and a wedged session."""

from __future__ import annotations

from tests.integration.watchdog.wedging import airflow_schema, metadata_db, wedge_factory

__all__ = ["airflow_schema", "metadata_db", "wedge_factory"]
