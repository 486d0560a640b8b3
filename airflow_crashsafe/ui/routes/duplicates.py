"""Duplicate executions, filtered by DAG, risk and time."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.audit.classify import RISKS
from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ReadableDags, StoreDep
from airflow_crashsafe.ui.models import DuplicateList
from airflow_crashsafe.ui.render import page

__all__ = ["router"]

router = APIRouter(tags=["duplicates"])
Days = Annotated[int, Query(ge=1, le=365, description="slots active in the last days")]
DagFilter = Annotated[str | None, Query(description="only this DAG")]
RiskFilter = Annotated[str | None, Query(description=f"only this risk: {', '.join(RISKS)}")]
Limit = Annotated[int, Query(ge=1, le=5000)]


def _list(
    store: StoreDep, allowed: ReadableDags, days: int, dag_id: str | None, risk: str | None, limit: int
) -> DuplicateList:
    pending = queries.pending_classification(store)
    total, items = queries.duplicate_slots(
        store, allowed, since=timedelta(days=days), dag_id=dag_id or None, risk=risk or None, limit=limit
    )
    return DuplicateList(total=total, items=items, pending_classification=pending)


@router.get("/api/duplicates", response_model=DuplicateList)
def duplicates_api(
    store: StoreDep,
    allowed: ReadableDags,
    days: Days = 7,
    dag_id: DagFilter = None,
    risk: RiskFilter = None,
    limit: Limit = 100,
) -> DuplicateList:
    """Slots of readable DAGs that executed more than once, highest risk and newest first."""
    return _list(store, allowed, days, dag_id, risk, limit)


@router.get("/duplicates", response_class=HTMLResponse, include_in_schema=False)
def duplicates_page(
    request: Request,
    user: GetUserDep,
    store: StoreDep,
    allowed: ReadableDags,
    days: Days = 7,
    dag_id: DagFilter = None,
    risk: RiskFilter = None,
) -> HTMLResponse:
    found = _list(store, allowed, days, dag_id, risk, 100)
    return page(
        request,
        "duplicates.html",
        active="duplicates_page",
        user_name=user.get_name(),
        dags=sorted(allowed),
        risks=list(reversed(RISKS)),
        f={"dag_id": dag_id, "risk": risk, "days": days},
        total=found.total,
        items=found.items,
        pending=found.pending_classification,
    )
