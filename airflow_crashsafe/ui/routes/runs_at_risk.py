"""Runs at risk: queued and running runs with a deadline, their forecast finish and critical path."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.ui import metadata
from airflow_crashsafe.ui.access import DagFilter, ReadableDags
from airflow_crashsafe.ui.models import RunsAtRisk
from airflow_crashsafe.ui.render import page
from airflow_crashsafe.ui.risk import Rules, due_runs, judge, load_rules

__all__ = ["RISK_STATES", "router", "runs_at_risk"]

log = logging.getLogger(__name__)
router = APIRouter(tags=["runs at risk"])
RISK_STATES = ("missed", "at_risk", "on_track")
StateFilter = Annotated[str | None, Query(description=f"only this state: {', '.join(RISK_STATES)}")]
MetadataDep = Annotated[Session, Depends(metadata.metadata_session)]


def runs_at_risk(session: Session, dags: list[str], rules: Rules, now: datetime) -> RunsAtRisk:
    """Every queued or running run of ``dags`` with a deadline, missed first, then least slack."""
    readable = set(dags)
    since: dict[str, datetime] = {}
    for deadline in rules.deadlines:
        if deadline.dag_id in readable:
            for occurrence in deadline.occurrences(now, rules.keep):
                earliest = since.get(deadline.dag_id, occurrence.due_from)
                since[deadline.dag_id] = min(earliest, occurrence.due_from)
    runs = metadata.runs_since(session, since)
    theirs, their_runs = metadata.airflow_deadlines(session, readable)
    for dag_id, extra in their_runs.items():
        known = {r.run_id for r in runs.get(dag_id, ())}
        runs.setdefault(dag_id, []).extend(r for r in extra if r.run_id not in known)
    due = due_runs(rules, runs, theirs, now)[: metadata.MAX_RUNS_SHOWN]
    dag_ids = {d.dag_id for d in due}
    tis = metadata.task_instances(session, [(d.dag_id, d.run.run_id) for d in due])
    graphs = metadata.graphs(session, dag_ids)
    history = metadata.durations(session, dag_ids, rules.history, now)
    items = [
        judge(
            d,
            graphs.get(d.dag_id),
            history.get(d.dag_id, {}),
            tis.get((d.dag_id, d.run.run_id), []),
            now,
            rules.default_duration,
        )
        for d in due
    ]
    order = {state: i for i, state in enumerate(RISK_STATES)}
    items.sort(key=lambda r: (order[r.state], r.slack_seconds if r.slack_seconds is not None else 0.0))
    return RunsAtRisk(generated_at=now, total=len(items), items=items, sources=[], problems=[])


def _file_name_only(text: str, path: str | None) -> str:
    """``text`` with the deadlines file named by its name only: a viewer needs to know which file,
    not where the server keeps it (in any spelling of the path an error may use)."""
    if not path:
        return text
    name = os.path.basename(path)
    spellings = {
        path,
        str(Path(path)),
        os.path.abspath(path),
        os.path.realpath(path),
        str(Path(path).expanduser()),
    }
    for spelling in sorted(spellings, key=len, reverse=True):
        text = text.replace(spelling, name)
    return text


@router.get("/api/runs-at-risk", response_model=RunsAtRisk)
def runs_at_risk_api(
    allowed: ReadableDags, session: MetadataDep, dag_id: DagFilter = None, state: StateFilter = None
) -> RunsAtRisk:
    """Queued and running runs of readable DAGs with a deadline (``[crashsafe] deadlines_config``'s
    ``[[deadlines]]`` and Airflow's DeadlineAlerts): deadline, forecast finish, slack, state and
    the tasks on the critical path."""
    now = datetime.now(timezone.utc)
    dags = sorted(allowed) if not dag_id else ([dag_id] if dag_id in allowed else [])
    path, problems = config.deadlines_config(), []
    try:
        rules = load_rules(path)
    except ConfigurationError as exc:
        log.warning("runs at risk: [[deadlines]] not read: %s", exc)  # the whole path, for operators
        rules, problems = Rules(), [_file_name_only(str(exc), path)]
    found = runs_at_risk(session, dags, rules, now)
    items = [r for r in found.items if not state or r.state == state]
    sources = ["Airflow's DeadlineAlerts"] + (
        [f"[[deadlines]] of {_file_name_only(path, path)}"] if path else []
    )
    return found.model_copy(
        update={"items": items, "total": len(items), "sources": sources, "problems": problems}
    )


@router.get("/runs-at-risk", response_class=HTMLResponse, include_in_schema=False)
def runs_at_risk_page(
    request: Request,
    user: GetUserDep,
    allowed: ReadableDags,
    session: MetadataDep,
    dag_id: DagFilter = None,
    state: StateFilter = None,
) -> HTMLResponse:
    found = runs_at_risk_api(allowed, session, dag_id, state)
    return page(
        request,
        "runs_at_risk.html",
        active="runs_at_risk_page",
        user_name=user.get_name(),
        dags=sorted(allowed),
        f={"dag_id": dag_id, "state": state},
        states=RISK_STATES,
        r=found,
    )
