"""crashsafe's own tables and the SQL that reads and writes them (and nothing else does)."""

from __future__ import annotations

from airflow_crashsafe.store.store import Store, open_store, reset_store_cache

__all__ = ["Store", "open_store", "reset_store_cache"]
