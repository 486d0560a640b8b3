"""The risk map: each task's verdict from its DAG's latest recorded scan, and whether it ran twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ListReader
from airflow_crashsafe.ui.models import RiskList
from airflow_crashsafe.ui.render import list_page

__all__ = ["router"]

router = APIRouter(tags=["risk"])
Days = Annotated[int, Query(ge=1, le=365, description="count duplicate runs of the last days")]
VerdictFilter = Annotated[
    str | None, Query(description=f"only this verdict: {', '.join(queries.SCAN_VERDICTS)}")
]
Limit = Annotated[int, Query(ge=1, le=5000)]


@router.get("/api/risk", response_model=RiskList)
def risk_api(
    reader: ListReader, days: Days = 30, verdict: VerdictFilter = None, limit: Limit = 500
) -> RiskList:
    """Tasks of readable DAGs by their latest scan verdict, risky first, with their duplicate runs."""
    total, items = queries.risk_map(reader, verdict=verdict or None, since=timedelta(days=days), limit=limit)
    return RiskList(total=total, items=items)


@router.get("/risk", response_class=HTMLResponse, include_in_schema=False)
def risk_page(
    request: Request, user: GetUserDep, reader: ListReader, days: Days = 30, verdict: VerdictFilter = None
) -> HTMLResponse:
    found = risk_api(reader, days, verdict)
    filters = {"verdict": verdict, "days": days}
    return list_page("risk", request, user, reader, found, filters, verdicts=list(queries.SCAN_VERDICTS))
