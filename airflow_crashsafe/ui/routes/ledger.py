"""The idempotency ledger: keys, state, vendor status, sends and replays (requests never shown)."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from airflow_crashsafe.store.ledger import LEDGER_STATES
from airflow_crashsafe.ui import queries
from airflow_crashsafe.ui.access import ReadableDags, StoreDep
from airflow_crashsafe.ui.models import LedgerList
from airflow_crashsafe.ui.render import page

__all__ = ["router"]

router = APIRouter(tags=["ledger"])
DagFilter = Annotated[str | None, Query(description="only this DAG")]
StateFilter = Annotated[str | None, Query(description=f"only this state: {', '.join(LEDGER_STATES)}")]
Limit = Annotated[int, Query(ge=1, le=5000)]


@router.get("/api/ledger", response_model=LedgerList)
def ledger_api(
    store: StoreDep,
    allowed: ReadableDags,
    dag_id: DagFilter = None,
    state: StateFilter = None,
    limit: Limit = 500,
) -> LedgerList:
    """Idempotency keys of readable DAGs, newest intent first."""
    total, items = queries.ledger_entries(
        store, allowed, dag_id=dag_id or None, state=state or None, limit=limit
    )
    return LedgerList(total=total, items=items)


@router.get("/ledger", response_class=HTMLResponse, include_in_schema=False)
def ledger_page(
    request: Request,
    user: GetUserDep,
    store: StoreDep,
    allowed: ReadableDags,
    dag_id: DagFilter = None,
    state: StateFilter = None,
) -> HTMLResponse:
    total, items = queries.ledger_entries(store, allowed, dag_id=dag_id or None, state=state or None)
    return page(
        request,
        "ledger.html",
        active="ledger_page",
        user_name=user.get_name(),
        dags=sorted(allowed),
        states=LEDGER_STATES,
        f={"dag_id": dag_id, "state": state},
        total=total,
        items=items,
    )
