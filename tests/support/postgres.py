"""The tests' PostgreSQL helpers: :mod:`airflow_crashsafe.testing.postgres`, the public throwaway cluster."""

from __future__ import annotations

from airflow_crashsafe.testing.postgres import drop_database, make_database

__all__ = ["drop_database", "make_database"]
