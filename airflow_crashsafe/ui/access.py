"""Who is asking, and which DAGs they may read: the dependencies every route of the UI takes.

Airflow applies no auth to plugin apps, so each route depends on :data:`ReadableDags`, which
requires an authenticated Airflow user (``GetUserDep``: bearer token or the UI's ``_token``
cookie, 401 otherwise) and resolves the DAG ids the auth manager lets that user GET. Every result
is filtered to that set before it is shaped for output; a DAG outside it is reported exactly like
one that does not exist, so not even its id leaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, Query

from airflow_crashsafe.store import Store, open_store

__all__ = ["ListReader", "ReadableDags", "Reader", "StoreDep", "list_reader", "readable_dag_ids", "ui_store"]


def readable_dag_ids(user: GetUserDep) -> frozenset[str]:
    """The DAG ids ``user`` may read, as the configured auth manager decides (per request)."""
    return frozenset(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))


def ui_store() -> Store:
    """The crashsafe store the pages read (``[crashsafe] conn_id`` or the embedded SQLite file)."""
    return open_store()


ReadableDags = Annotated[frozenset[str], Depends(readable_dag_ids)]
StoreDep = Annotated[Store, Depends(ui_store)]


@dataclass(frozen=True)
class Reader:
    """One request for a list: the store, the DAGs the user may read, the one DAG asked for."""

    store: Store
    allowed: frozenset[str]
    dag_id: str | None = None

    def dags(self) -> list[str]:
        """The DAGs to list: the one asked for if readable (none if not), else every readable one."""
        if self.dag_id is None:
            return sorted(self.allowed)
        return [self.dag_id] if self.dag_id in self.allowed else []


def list_reader(
    store: StoreDep,
    allowed: ReadableDags,
    dag_id: Annotated[str | None, Query(description="only this DAG")] = None,
) -> Reader:
    """Who reads a list, and the DAG filter of the page or JSON route (empty: every DAG)."""
    return Reader(store, allowed, dag_id or None)


ListReader = Annotated[Reader, Depends(list_reader)]
