"""Fence rejections (a stale attempt's write refused) and committed work a retry skipped."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ReadableDags, StoreDep
from airflow_crashsafe.ui.models import EventList
from airflow_crashsafe.ui.render import page

__all__ = ["router"]

router = APIRouter(tags=["fences"])
DagFilter = Annotated[str | None, Query(description="only this DAG")]
KindFilter = Annotated[str | None, Query(description="fenced_out or skipped_committed")]
Limit = Annotated[int, Query(ge=1, le=5000)]


@router.get("/api/fences", response_model=EventList)
def fences_api(
    store: StoreDep,
    allowed: ReadableDags,
    dag_id: DagFilter = None,
    kind: KindFilter = None,
    limit: Limit = 500,
) -> EventList:
    """Fence events of readable DAGs, newest first."""
    total, items = queries.fence_events(store, allowed, dag_id=dag_id or None, kind=kind or None, limit=limit)
    return EventList(total=total, items=items)


@router.get("/fences", response_class=HTMLResponse, include_in_schema=False)
def fences_page(
    request: Request,
    user: GetUserDep,
    store: StoreDep,
    allowed: ReadableDags,
    dag_id: DagFilter = None,
    kind: KindFilter = None,
) -> HTMLResponse:
    total, items = queries.fence_events(store, allowed, dag_id=dag_id or None, kind=kind or None)
    return page(
        request,
        "fences.html",
        active="fences_page",
        user_name=user.get_name(),
        dags=sorted(allowed),
        kinds=queries.FENCE_KINDS,
        f={"dag_id": dag_id, "kind": kind},
        total=total,
        items=items,
    )
