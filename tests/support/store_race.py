"""A ``multiprocessing`` entry point: migrate a store at the same moment as other processes."""

from __future__ import annotations

from typing import Any

__all__ = ["migrate_in_child"]


def migrate_in_child(url: str, barrier: Any, results: Any) -> None:
    """Wait for the other processes, then run ``Store.migrate()`` on ``url``; report the result."""
    from airflow_crashsafe.store.dbapi import connect_url
    from airflow_crashsafe.store.store import Store

    store = Store(lambda: connect_url(url), location=url)
    try:
        barrier.wait(timeout=120)
        results.put(("ok", store.migrate()))
    except Exception as exc:
        results.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        store.close()
