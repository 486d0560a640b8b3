"""The idempotency ledger: keys, state, vendor status, sends and replays (requests never shown)."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.store.ledger import LEDGER_STATES
from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import LedgerReader
from airflow_crashsafe.ui.models import LedgerList
from airflow_crashsafe.ui.render import list_page

__all__ = ["router"]

router = APIRouter(tags=["ledger"])
StateFilter = Annotated[str | None, Query(description=f"only this state: {', '.join(LEDGER_STATES)}")]
Limit = Annotated[int, Query(ge=1, le=5000)]


@router.get("/api/ledger", response_model=LedgerList)
def ledger_api(reader: LedgerReader, state: StateFilter = None, limit: Limit = 500) -> LedgerList:
    """Idempotency keys of readable DAGs, newest intent first."""
    total, items = queries.ledger_entries(reader, state=state or None, limit=limit)
    return LedgerList(total=total, items=items)


@router.get("/ledger", response_class=HTMLResponse, include_in_schema=False)
def ledger_page(
    request: Request, user: GetUserDep, reader: LedgerReader, state: StateFilter = None
) -> HTMLResponse:
    found = ledger_api(reader, state)
    return list_page("ledger", request, user, reader, found, {"state": state}, states=LEDGER_STATES)
