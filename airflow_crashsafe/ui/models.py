"""The JSON API's response models (also the pages' view models, so both show the same facts)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

__all__ = [
    "ComponentHealth",
    "DuplicateList",
    "DuplicateSlot",
    "EventList",
    "ExecutionOut",
    "FenceEvent",
    "LedgerEntryOut",
    "LedgerList",
    "Outage",
    "Overview",
    "RerunOut",
    "RiskList",
    "RiskTask",
    "RunAtRisk",
    "RunsAtRisk",
    "TaskRemaining",
    "Timeline",
]


class ComponentHealth(BaseModel):
    """One Airflow component as the api-server's health check sees it now."""

    component: str
    status: str = Field(description="healthy, unhealthy or never_started")
    latest_heartbeat: datetime | None = None
    heartbeat_age_seconds: float | None = None


class Outage(BaseModel):
    """A window with no live scheduler (from Airflow's job table)."""

    started_at: datetime
    ended_at: datetime | None = Field(None, description="null while the outage goes on")
    seconds: float
    ongoing: bool = False


class Overview(BaseModel):
    """Health now, recent outages and the duplicates of the readable DAGs by risk."""

    generated_at: datetime
    days: int
    metadatabase_ok: bool
    components: list[ComponentHealth]
    outages: list[Outage]
    duplicates_by_risk: dict[str, int]
    fence_rejections: int
    skipped_committed: int
    pending_classification: int = Field(
        0, description="task instances whose changes the duplicate counts do not include yet"
    )


class ExecutionOut(BaseModel):
    """One execution of a slot: a try run by one process."""

    run_id: str
    try_number: int
    hostname: str
    pid: int
    ti_id: str | None = None
    clear_number: int | None = None
    started_at: datetime
    ended_at: datetime | None = None
    alive_until: datetime
    end_source: str | None = None
    state: str | None = None


class RerunOut(BaseModel):
    """Why a later execution re-ran the slot, and how long it overlapped an earlier one."""

    earlier_try: int
    later_try: int
    earlier_pid: int
    later_pid: int
    kinds: list[str]
    overlap_seconds: float


class DuplicateSlot(BaseModel):
    """A slot that executed more than once, classified by the audit."""

    dag_id: str
    task_id: str
    map_index: int
    partition: str
    runs: int
    kinds: list[str]
    overlap_seconds: float
    protection: str
    protection_evidence: list[str]
    risk: str
    first_started_at: datetime
    executions: list[ExecutionOut]


class DuplicateList(BaseModel):
    total: int
    items: list[DuplicateSlot]
    pending_classification: int = Field(
        0, description="task instances whose changes this list does not include yet"
    )


class Timeline(BaseModel):
    """Every execution of one slot, its re-runs and the scheduler outages around them."""

    dag_id: str
    task_id: str
    map_index: int
    partition: str
    protection: str
    risk: str
    executions: list[ExecutionOut]
    reruns: list[RerunOut]
    outages: list[Outage]


class LedgerEntryOut(BaseModel):
    """One idempotency key; the request is never shown and secret-looking fields are masked."""

    idem_key: str
    dag_id: str
    task_id: str
    map_index: int
    partition: str
    target: str
    version: int
    state: str
    vendor_status: int | None = None
    send_count: int
    replay_count: int
    try_number: int | None = None
    hostname: str | None = None
    intent_at: str
    outcome_at: str | None = None
    result: Any = None
    error: str | None = None


class LedgerList(BaseModel):
    total: int
    items: list[LedgerEntryOut]


class FenceEvent(BaseModel):
    """A fence rejection (``fenced_out``) or committed work skipped by a retry (``skipped_committed``)."""

    id: int
    kind: str
    dag_id: str
    task_id: str
    map_index: int
    partition: str
    target: str
    run_id: str | None = None
    try_number: int | None = None
    hostname: str | None = None
    pid: int | None = None
    token: int | None = None
    created_at: str
    detail: dict[str, Any]


class EventList(BaseModel):
    total: int
    items: list[FenceEvent]


class RiskTask(BaseModel):
    """A task's verdict from the latest recorded scan of its DAG, and what the audit saw it do."""

    dag_id: str
    task_id: str
    file: str
    line: int | None
    operator: str
    verdict: str = Field(description="protected, safe, risky or unknown (docs/scan.md)")
    category: str
    reasons: list[dict[str, Any]]
    fix: str
    scanned_at: datetime
    duplicated_slots: int = Field(0, description="slots of this task the audit saw run more than once")
    harmful_slots: int = Field(0, description="of those, the ones it judged risky (unprotected, harmful)")


class RiskList(BaseModel):
    total: int
    items: list[RiskTask]


class TaskRemaining(BaseModel):
    """One task on a run's critical path and what is expected to be left of it."""

    task_id: str
    remaining_seconds: float
    state: str | None = Field(None, description="the task's state now (mapped: the least advanced)")


class RunAtRisk(BaseModel):
    """A queued or running DAG run with a deadline: when it must be done and when it will be."""

    dag_id: str
    run_id: str
    run_state: str
    run_after: datetime
    deadline: str = Field(description="the [[deadlines]] entry's name, or airflow:<alert> for Airflow's own")
    source: str = Field(description="crashsafe ([[deadlines]]) or airflow (a DeadlineAlert's deadline row)")
    deadline_at: datetime
    forecast_finish: datetime | None = Field(None, description="null when the DAG's tasks cannot be read")
    slack_seconds: float | None = Field(None, description="deadline minus forecast finish; negative: late")
    state: str = Field(description="on_track, at_risk (forecast after the deadline) or missed")
    critical_path: list[TaskRemaining]
    note: str | None = None


class RunsAtRisk(BaseModel):
    """Every queued or running run of the readable DAGs that has a deadline, least slack first."""

    generated_at: datetime
    total: int
    items: list[RunAtRisk]
    sources: list[str] = Field(description="where the deadlines came from")
    problems: list[str] = Field(description="deadline sources that could not be read")
