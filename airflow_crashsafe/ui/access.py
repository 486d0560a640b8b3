"""Who is asking, and which DAGs they may read: the dependencies every route of the UI takes.

Airflow applies no auth to plugin apps, so each route depends on :data:`ReadableDags`, which
requires an authenticated Airflow user (``GetUserDep``: bearer token or the UI's ``_token``
cookie, 401 otherwise) and resolves the DAG ids the auth manager lets that user GET together with
their task instances (``DagAccessEntity.TASK_INSTANCE``), as Airflow's own task-instance routes
require: every page shows executions of task instances. The ledger shows what tasks returned, so
it also requires ``DagAccessEntity.XCOM`` (:data:`XComReadableDags`). Every result is filtered to
that set inside the store's queries; a DAG outside it is reported exactly like one that does not
exist, so not even its id leaks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import Depends, Query

from airflow_crashsafe.store import Store, open_store

__all__ = [
    "LedgerReader",
    "ListReader",
    "ReadableDags",
    "Reader",
    "StoreDep",
    "XComReadableDags",
    "ledger_reader",
    "list_reader",
    "readable_dag_ids",
    "ui_store",
    "xcom_readable_dag_ids",
]


def _with_entity(user: BaseUser, dag_ids: frozenset[str], entity: DagAccessEntity) -> frozenset[str]:
    """The DAGs of ``dag_ids`` whose ``entity`` (task instances, XComs) ``user`` may read."""
    manager = get_auth_manager()
    return frozenset(
        dag_id
        for dag_id in dag_ids
        if manager.is_authorized_dag(
            method="GET", access_entity=entity, details=DagDetails(id=dag_id), user=user
        )
    )


def readable_dag_ids(user: GetUserDep) -> frozenset[str]:
    """The DAG ids whose task instances ``user`` may read, as the auth manager decides (per request)."""
    dag_ids = frozenset(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))
    return _with_entity(user, dag_ids, DagAccessEntity.TASK_INSTANCE)


def xcom_readable_dag_ids(
    user: GetUserDep, readable: Annotated[frozenset[str], Depends(readable_dag_ids)]
) -> frozenset[str]:
    """Of those, the DAGs whose XComs (what tasks returned) ``user`` may read too: the ledger's."""
    return _with_entity(user, readable, DagAccessEntity.XCOM)


def ui_store() -> Store:
    """The crashsafe store the pages read (``[crashsafe] conn_id`` or the embedded SQLite file)."""
    return open_store()


ReadableDags = Annotated[frozenset[str], Depends(readable_dag_ids)]
XComReadableDags = Annotated[frozenset[str], Depends(xcom_readable_dag_ids)]
StoreDep = Annotated[Store, Depends(ui_store)]
DagFilter = Annotated[str | None, Query(description="only this DAG")]


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
    dag_id: DagFilter = None,
) -> Reader:
    """Who reads a list, and the DAG filter of the page or JSON route (empty: every DAG)."""
    return Reader(store, allowed, dag_id or None)


def ledger_reader(
    store: StoreDep,
    allowed: XComReadableDags,
    dag_id: DagFilter = None,
) -> Reader:
    """:func:`list_reader` for the ledger, whose DAGs' XComs must be readable too."""
    return Reader(store, allowed, dag_id or None)


ListReader = Annotated[Reader, Depends(list_reader)]
LedgerReader = Annotated[Reader, Depends(ledger_reader)]
