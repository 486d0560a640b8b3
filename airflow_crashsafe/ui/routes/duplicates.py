"""Duplicate executions, filtered by DAG, risk and time."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.audit.classify import RISKS
from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ListReader
from airflow_crashsafe.ui.models import DuplicateList
from airflow_crashsafe.ui.render import list_page

__all__ = ["router"]

router = APIRouter(tags=["duplicates"])
Days = Annotated[int, Query(ge=1, le=365, description="slots active in the last days")]
RiskFilter = Annotated[str | None, Query(description=f"only this risk: {', '.join(RISKS)}")]
Limit = Annotated[int, Query(ge=1, le=5000)]


@router.get("/api/duplicates", response_model=DuplicateList)
def duplicates_api(
    reader: ListReader, days: Days = 7, risk: RiskFilter = None, limit: Limit = 100
) -> DuplicateList:
    """Slots of readable DAGs that executed more than once, highest risk and newest first."""
    pending = queries.pending_classification(reader)
    total, items = queries.duplicate_slots(reader, since=timedelta(days=days), risk=risk or None, limit=limit)
    return DuplicateList(total=total, items=items, pending_classification=pending)


@router.get("/duplicates", response_class=HTMLResponse, include_in_schema=False)
def duplicates_page(
    request: Request, user: GetUserDep, reader: ListReader, days: Days = 7, risk: RiskFilter = None
) -> HTMLResponse:
    found = duplicates_api(reader, days, risk)
    filters = {"risk": risk, "days": days}
    risks = list(reversed(RISKS))
    return list_page(
        "duplicates", request, user, reader, found, filters, risks=risks, pending=found.pending_classification
    )
