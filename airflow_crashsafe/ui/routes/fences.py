"""Fence rejections (a stale attempt's write refused) and committed work a retry skipped."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ListReader
from airflow_crashsafe.ui.models import EventList
from airflow_crashsafe.ui.render import list_page

__all__ = ["router"]

router = APIRouter(tags=["fences"])
KindFilter = Annotated[str | None, Query(description="fenced_out or skipped_committed")]
Limit = Annotated[int, Query(ge=1, le=5000)]


@router.get("/api/fences", response_model=EventList)
def fences_api(reader: ListReader, kind: KindFilter = None, limit: Limit = 500) -> EventList:
    """Fence events of readable DAGs, newest first."""
    total, items = queries.fence_events(reader, kind=kind or None, limit=limit)
    return EventList(total=total, items=items)


@router.get("/fences", response_class=HTMLResponse, include_in_schema=False)
def fences_page(
    request: Request, user: GetUserDep, reader: ListReader, kind: KindFilter = None
) -> HTMLResponse:
    found = fences_api(reader, kind)
    return list_page("fences", request, user, reader, found, {"kind": kind}, kinds=queries.FENCE_KINDS)
