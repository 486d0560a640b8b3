"""A task context made of plain objects, to drive operators and helpers outside a running task."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

__all__ = ["fake_context"]


def fake_context(
    *,
    dag_id: str = "example_dag",
    task_id: str = "example_task",
    run_id: str = "scheduled__2026-11-29T00:00:00+00:00",
    logical_date: datetime | None = datetime(2026, 11, 29, tzinfo=timezone.utc),
    try_number: int = 1,
    map_index: int = -1,
    clear_number: int = 0,
    ti_id: str | None = None,
) -> dict[str, Any]:
    """``{"ti": ..., "dag_run": ...}`` with the attributes crashsafe reads (docs/design.md, "Attempt")."""
    ti = SimpleNamespace(
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        map_index=map_index,
        try_number=try_number,
        id=ti_id or str(uuid.uuid4()),
    )
    dag_run = SimpleNamespace(
        dag_id=dag_id,
        run_id=run_id,
        logical_date=logical_date,
        clear_number=clear_number,
    )
    return {"ti": ti, "dag_run": dag_run, "run_id": run_id}
