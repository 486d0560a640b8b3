"""Reads of Airflow's metadata database for the Runs at risk page, in bounded, DAG-filtered queries.

Each read takes the DAG ids the user may read and filters on them in its SQL; none loads more
than a bounded number of rows: runs of the DAGs with a deadline since their oldest watched
occurrence (at most :data:`MAX_RUNS` a DAG), the ``deadline`` rows of queued or running runs (at
most :data:`MAX_AIRFLOW_DEADLINES`), the task instances of at most :data:`MAX_RUNS_SHOWN` runs, the
newest ``serialized_dag`` row of their DAGs, and the last ``history`` successful durations of each
of their tasks within :data:`HISTORY_DAYS` days. Rows become the watchdog's plain values
(:class:`~airflow_crashsafe.watchdog.runs.RunView`, :class:`~airflow_crashsafe.watchdog.forecast.
TaskProgress`), so :mod:`airflow_crashsafe.ui.risk` forecasts exactly as the watchdog does.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.watchdog.forecast import TaskProgress
from airflow_crashsafe.watchdog.runs import GOING, AirflowDeadline, RunView, graph_from_serialized

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = [
    "HISTORY_DAYS",
    "MAX_AIRFLOW_DEADLINES",
    "MAX_RUNS",
    "MAX_RUNS_SHOWN",
    "airflow_deadlines",
    "durations",
    "graphs",
    "metadata_session",
    "runs_since",
    "task_instances",
]

MAX_RUNS = 200
MAX_AIRFLOW_DEADLINES = 500
MAX_RUNS_SHOWN = 100
HISTORY_DAYS = 30


def metadata_session() -> Iterator[Session]:
    """FastAPI dependency: a session on Airflow's metadata database (read only, closed after)."""
    from airflow.utils.session import create_session

    with create_session() as session:
        yield session


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _run(row: Any) -> RunView:
    after = _utc(row.run_after)
    assert after is not None  # NOT NULL in Airflow 3
    return RunView(
        str(row.run_id), str(row.run_type), str(row.state), after, _utc(row.start_date), _utc(row.end_date)
    )


def _run_columns() -> tuple[Any, ...]:
    from airflow.models.dagrun import DagRun

    return (
        DagRun.run_id,
        DagRun.run_type,
        DagRun.state,
        DagRun.run_after,
        DagRun.start_date,
        DagRun.end_date,
    )


def runs_since(session: Session, since: Mapping[str, datetime]) -> dict[str, list[RunView]]:
    """Per DAG of ``since`` (already filtered to readable DAGs), its runs due since then, newest first."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    out: dict[str, list[RunView]] = {}
    for dag_id, after in since.items():
        rows = session.execute(
            select(*_run_columns())
            .where(DagRun.dag_id == dag_id, DagRun.run_after >= after)
            .order_by(DagRun.run_after.desc())
            .limit(MAX_RUNS)
        ).all()
        out[dag_id] = [_run(r) for r in rows]
    return out


def airflow_deadlines(
    session: Session, dag_ids: Collection[str]
) -> tuple[list[AirflowDeadline], dict[str, list[RunView]]]:
    """The ``deadline`` rows of queued or running runs of ``dag_ids``, soonest first, and their runs."""
    from airflow.models.dagrun import DagRun
    from airflow.models.deadline import Deadline
    from airflow.models.deadline_alert import DeadlineAlert
    from sqlalchemy import select

    if not dag_ids:
        return [], {}
    rows = session.execute(
        select(DagRun.dag_id, *_run_columns(), Deadline.deadline_time, DeadlineAlert.name)
        .join(DagRun, DagRun.id == Deadline.dagrun_id)
        .outerjoin(DeadlineAlert, DeadlineAlert.id == Deadline.deadline_alert_id)
        .where(DagRun.state.in_(GOING), DagRun.dag_id.in_(sorted(dag_ids)))
        .order_by(Deadline.deadline_time)
        .limit(MAX_AIRFLOW_DEADLINES)
    ).all()
    found: list[AirflowDeadline] = []
    runs: dict[str, dict[str, RunView]] = {}
    for r in rows:
        run, at = _run(r), _utc(r.deadline_time)
        assert at is not None
        found.append(AirflowDeadline(str(r.dag_id), run.run_id, at, r.name, run.run_after))
        runs.setdefault(str(r.dag_id), {})[run.run_id] = run
    return found, {dag: list(by_id.values()) for dag, by_id in runs.items()}


def task_instances(
    session: Session, runs: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], list[TaskProgress]]:
    """The task instances of each ``(dag_id, run_id)`` (at most :data:`MAX_RUNS_SHOWN` runs)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import and_, or_, select

    wanted = list(dict.fromkeys(runs))[:MAX_RUNS_SHOWN]
    out: dict[tuple[str, str], list[TaskProgress]] = {key: [] for key in wanted}
    if not wanted:
        return out
    rows = session.execute(
        select(TI.dag_id, TI.run_id, TI.task_id, TI.state, TI.start_date, TI.map_index).where(
            or_(*(and_(TI.dag_id == dag, TI.run_id == run) for dag, run in wanted))
        )
    ).all()
    for r in rows:
        state = None if r.state is None else str(r.state)
        out[str(r.dag_id), str(r.run_id)].append(
            TaskProgress(str(r.task_id), state, _utc(r.start_date), int(r.map_index))
        )
    return out


def graphs(session: Session, dag_ids: Collection[str]) -> dict[str, dict[str, tuple[str, ...]]]:
    """Task id → downstream ids of each DAG, from its newest ``serialized_dag`` row (absent: not parsed)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from sqlalchemy import select

    table = SerializedDagModel.__table__
    out = {}
    for dag_id in sorted(dag_ids):
        row = session.execute(
            select(table.c["data"], table.c["data_compressed"])
            .where(table.c["dag_id"] == dag_id)
            .order_by(table.c["last_updated"].desc())
            .limit(1)
        ).first()
        if row is not None and (row[0] is not None or row[1] is not None):
            out[dag_id] = graph_from_serialized(row[0], row[1])
    return out


def durations(
    session: Session, dag_ids: Collection[str], history: int, now: datetime
) -> dict[str, dict[str, tuple[float, ...]]]:
    """Per DAG, each task's last ``history`` successful durations (newest first, last 30 days)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from sqlalchemy import func, select

    since = now - timedelta(days=HISTORY_DAYS)
    out: dict[str, dict[str, tuple[float, ...]]] = {}
    for dag_id in sorted(dag_ids):
        ranked = (
            select(
                TI.task_id,
                TI.duration,
                func.row_number().over(partition_by=TI.task_id, order_by=TI.end_date.desc()).label("n"),
            )
            .where(
                TI.dag_id == dag_id,
                TI.state == "success",
                TI.duration.is_not(None),
                TI.end_date >= since,
            )
            .subquery()
        )
        found: dict[str, list[float]] = {}
        rows = session.execute(
            select(ranked.c.task_id, ranked.c.duration).where(ranked.c.n <= history).order_by(ranked.c.n)
        ).all()
        for task, duration in rows:
            found.setdefault(str(task), []).append(float(duration))
        out[dag_id] = {task: tuple(d) for task, d in found.items()}
    return out
