"""The overview: scheduler and component health now, recent outages, duplicates by risk."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ReadableDags, Reader, StoreDep
from airflow_crashsafe.ui.health import SchedulerState, scheduler_state
from airflow_crashsafe.ui.models import Overview
from airflow_crashsafe.ui.render import page

__all__ = ["router"]

router = APIRouter(tags=["overview"])
Days = Annotated[int, Query(ge=1, le=365, description="how many days back")]
SchedulerDep = Annotated[SchedulerState, Depends(scheduler_state)]


@router.get("/api/overview", response_model=Overview)
def overview_api(store: StoreDep, allowed: ReadableDags, scheduler: SchedulerDep, days: Days = 7) -> Overview:
    """Health now, outages in the last ``days``, duplicates by risk."""
    now = datetime.now(timezone.utc)
    ok, components = scheduler.health()
    reader = Reader(store, allowed)
    kinds = queries.fence_counts(reader)
    pending = queries.pending_classification(reader)
    return Overview(
        generated_at=now,
        days=days,
        metadatabase_ok=ok,
        components=components,
        outages=scheduler.outages(since=now - timedelta(days=days), now=now),
        duplicates_by_risk=queries.risk_counts(reader, since=timedelta(days=days)),
        fence_rejections=kinds.get("fenced_out", 0),
        skipped_committed=kinds.get("skipped_committed", 0),
        pending_classification=pending,
    )


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def overview_page(
    request: Request, user: GetUserDep, overview: Annotated[Overview, Depends(overview_api)]
) -> HTMLResponse:
    return page(request, "overview.html", active="overview_page", user_name=user.get_name(), o=overview)
