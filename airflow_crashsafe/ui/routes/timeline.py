"""One slot's attempt timeline: the task-instance tab and the duplicates page link here."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ReadableDags, StoreDep
from airflow_crashsafe.ui.chart import chart
from airflow_crashsafe.ui.health import SchedulerState, scheduler_state
from airflow_crashsafe.ui.models import Timeline
from airflow_crashsafe.ui.render import page

__all__ = ["router"]

router = APIRouter(tags=["timeline"])
SchedulerDep = Annotated[SchedulerState, Depends(scheduler_state)]
NOT_FOUND = "No attempts recorded for this slot."
#: Airflow 3.3's UI fills ``{MAP_INDEX}`` in a task-instance tab's href only on a mapped task
#: instance's page; on any other it arrives as written.
UNFILLED_MAP_INDEX = "{MAP_INDEX}"


def _map_index(
    map_index: Annotated[
        str, Query(description="the task's map index; -1 (or Airflow's unfilled {MAP_INDEX}): not mapped")
    ] = "-1",
) -> int:
    """The map index, from a number or the placeholder Airflow leaves on an unmapped task's tab."""
    if map_index == UNFILLED_MAP_INDEX:
        return -1
    try:
        return int(map_index)
    except ValueError:
        raise HTTPException(422, f"map_index must be an integer, not {map_index[:40]!r}") from None


@router.get("/api/timeline", response_model=Timeline)
def timeline_api(
    store: StoreDep,
    allowed: ReadableDags,
    scheduler: SchedulerDep,
    dag_id: Annotated[str, Query()],
    task_id: Annotated[str, Query()],
    map_index: Annotated[int, Depends(_map_index)],
    partition: Annotated[str | None, Query(description="the slot's partition")] = None,
    run_id: Annotated[str | None, Query(description="or a run of the slot (the task-instance tab)")] = None,
) -> Timeline:
    """Every execution of one slot, its re-runs, and the scheduler outages during them.

    404 alike for an unknown slot and for a DAG the user may not read.
    """
    found = None
    if dag_id in allowed:
        queries.refresh_digest(store)
        found = queries.timeline(
            store,
            allowed,
            dag_id=dag_id,
            task_id=task_id,
            map_index=map_index,
            partition=partition or None,
            run_id=run_id or None,
        )
    if found is None:
        raise HTTPException(404, NOT_FOUND)
    first = min(e.started_at for e in found.executions)
    now = datetime.now(timezone.utc)
    outages = scheduler.outages(since=first - timedelta(hours=1), now=now)
    return queries.with_outages(found, outages)


@router.get("/timeline", response_class=HTMLResponse, include_in_schema=False)
def timeline_page(
    request: Request, user: GetUserDep, timeline: Annotated[Timeline, Depends(timeline_api)]
) -> HTMLResponse:
    return page(
        request,
        "timeline.html",
        active="duplicates_page",
        user_name=user.get_name(),
        t=timeline,
        c=chart(timeline),
    )
