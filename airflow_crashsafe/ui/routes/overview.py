"""The overview: scheduler and component health now, recent outages, duplicates by risk."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ReadableDags, StoreDep
from airflow_crashsafe.ui.health import SchedulerState, scheduler_state
from airflow_crashsafe.ui.models import Overview
from airflow_crashsafe.ui.render import page

__all__ = ["router"]

router = APIRouter(tags=["overview"])
Days = Annotated[int, Query(ge=1, le=365, description="how many days back")]
SchedulerDep = Annotated[SchedulerState, Depends(scheduler_state)]


def build_overview(
    store: StoreDep, allowed: ReadableDags, scheduler: SchedulerDep, days: Days = 7
) -> Overview:
    """Everything the overview shows, for the DAGs the user may read."""
    now = datetime.now(timezone.utc)
    ok, components = scheduler.health()
    kinds = queries.fence_counts(store, allowed)
    pending = queries.pending_classification(store)
    return Overview(
        generated_at=now,
        days=days,
        metadatabase_ok=ok,
        components=components,
        outages=scheduler.outages(since=now - timedelta(days=days), now=now),
        duplicates_by_risk=queries.risk_counts(store, allowed, since=timedelta(days=days)),
        fence_rejections=kinds.get("fenced_out", 0),
        skipped_committed=kinds.get("skipped_committed", 0),
        pending_classification=pending,
    )


OverviewDep = Annotated[Overview, Depends(build_overview)]


@router.get("/api/overview", response_model=Overview)
def overview_api(overview: OverviewDep) -> Overview:
    """Health now, outages in the last ``days``, duplicates by risk."""
    return overview


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def overview_page(request: Request, user: GetUserDep, overview: OverviewDep) -> HTMLResponse:
    return page(request, "overview.html", active="overview_page", user_name=user.get_name(), o=overview)
