"""Classify re-runs of each slot from its attempt records (pure; no Airflow, no database).

A slot's executions are its rows with a known start, each try run by one process; rows of a try
whose process is unknown (a history or scheduler record) fold into that try's executions. Each
later execution is compared with the ones before it:

* ``overlap`` - it started while an earlier one was still alive (end, or last sign of life, later
  than its start); the overlap's length is reported. Orthogonal to the cause below.
* ``reset_rerun`` - the scheduler reset the previous attempt (or it vanished: its host lost) and
  re-ran the slot. Known when the previous attempt's process never reported its end: no hook saw
  it end, or only Airflow's verdict did (the scheduler failing a lost host's try at the task
  heartbeat timeout and retrying it: the process's end, and what its statements still do
  server-side, are unknown, so that is a crash re-run, not a retry of a reported failure); when
  it was still alive (an end or a beacon) after the next try started, which no Airflow retry allows (a retry's
  try exists only once the failing process has sent its end, and that end is what its hook
  records); or when its process got SIGTERM before it ended and the next try started within
  ``STALE_KILL_WINDOW`` of that: a stale attempt is SIGTERMed at its first heartbeat after the
  reset that already queued its successor, and its ``on_kill`` may make it fail (firing its
  failure hook) before the successor starts, while a retry waits ``retry_delay`` (5 min by
  default) after a reported failure. So "its process reported a failure" alone does not make a
  retry. This takes precedence over the states reported: a stale attempt may even report success.
* ``rerun_after_success`` - the previous attempt succeeded (a clear, a backfill of the same date,
  or a success re-marked failed).
* ``rerun_after_clear`` - a user cleared an attempt that had not succeeded (``clear_number`` grew).
* ``retry_after_failure`` - the previous attempt failed and Airflow retried it.
* ``same_try_twice`` - one try executed by two processes (broker redelivery), whatever the order
  of their ends: it is the cause, not one of the above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from airflow_crashsafe.store.attempts import merge_rows

__all__ = [
    "KINDS",
    "RESUME_START_SKEW",
    "RISKS",
    "STALE_KILL_WINDOW",
    "Execution",
    "Rerun",
    "SlotReport",
    "classify",
    "executions_of",
]

KINDS = (
    "overlap",
    "reset_rerun",
    "rerun_after_clear",
    "rerun_after_success",
    "retry_after_failure",
    "same_try_twice",
)
#: Lowest to highest.
RISKS = ("none", "low", "high", "critical")
_FAILED = {"failed", "up_for_retry", "upstream_failed"}
#: A successor starting this soon after its predecessor's SIGTERM was queued by a reset, not a retry
#: (the reset queues it before the stale heartbeat that brings the SIGTERM; it starts when an
#: executor slot frees). A retry configured with a shorter ``retry_delay`` after a SIGTERM from
#: elsewhere (a worker shut down) is counted as a reset re-run too.
STALE_KILL_WINDOW = timedelta(seconds=60)
#: How much earlier than a deferred process's own start the process resuming it may record its
#: start (the try's original start_date, stamped before the first process registered with the
#: api-server; about a second apart under load, more when that call is retried).
RESUME_START_SKEW = timedelta(seconds=15)


@dataclass(frozen=True)
class Execution:
    """One execution of a slot, as the records tell it."""

    run_id: str
    try_number: int
    hostname: str
    pid: int
    ti_id: str | None
    clear_number: int | None
    started_at: datetime
    ended_at: datetime | None
    end_source: str | None
    state: str | None  # Airflow's verdict, else what the process reported
    reported_state: str | None
    last_seen_at: datetime | None
    replay_safe: bool | None = None
    operator: str | None = None
    terminated_at: datetime | None = None  # when its process got SIGTERM

    @property
    def alive_until(self) -> datetime:
        """The latest moment it is known to have been running."""
        return max(t for t in (self.started_at, self.ended_at, self.last_seen_at) if t is not None)

    def describe(self) -> str:
        where = f"{self.hostname or '?'} pid {self.pid or '?'}"
        return f"try {self.try_number} ({where}, {self.state or 'running?'})"


@dataclass(frozen=True)
class Rerun:
    """A later execution and what made it a re-run of an earlier one."""

    earlier: Execution
    later: Execution
    kinds: tuple[str, ...]
    overlap_seconds: float = 0.0


@dataclass(frozen=True)
class SlotReport:
    """A slot that executed more than once, with its protection and risk."""

    dag_id: str
    task_id: str
    map_index: int
    partition: str
    executions: tuple[Execution, ...]
    reruns: tuple[Rerun, ...]
    protection: str = "unprotected"
    protection_evidence: tuple[str, ...] = field(default_factory=tuple)
    risk: str = "none"

    @property
    def kinds(self) -> tuple[str, ...]:
        seen = {k for r in self.reruns for k in r.kinds}
        return tuple(k for k in KINDS if k in seen)

    @property
    def overlap_seconds(self) -> float:
        return max((r.overlap_seconds for r in self.reruns), default=0.0)

    @property
    def runs(self) -> int:
        return len(self.executions)

    @property
    def first_started_at(self) -> datetime:
        return self.executions[0].started_at

    @property
    def slot_key(self) -> tuple[str, str, int, str]:
        return (self.dag_id, self.task_id, self.map_index, self.partition)


def _join(part: dict[str, Any], into: dict[str, Any]) -> dict[str, Any]:
    """``part`` (a process that stopped suspended) and ``into`` (the one that went on) as one row,
    keeping the latter's host, pid and end (still running: no end yet)."""
    joined = merge_rows(into, {**part, "hostname": into["hostname"], "pid": into["pid"]})
    joined.update({k: into.get(k) for k in ("ended_at", "end_source", "state", "state_source")})
    joined["reported_state"] = into.get("reported_state")
    return joined


def _own_life(row: Mapping[str, Any]) -> datetime:
    """The last moment a process itself showed life (its own end, else its last beacon or start)."""
    own_end = row.get("ended_at") if row.get("end_source") == "listener" else None
    return max(t for t in (row["started_at"], own_end, row.get("last_seen_at")) if t is not None)


def _resumed_by(part: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """``other`` resumed ``part``'s deferred try, though ``part``'s suspension record is missing.

    Only a process that says so resumed a try: Airflow hands a process resuming a deferral the
    method to resume (a rescheduled sensor's later poke, the try's reschedule count) and the audit
    records it (``resumed``); a process that starts a try (a broker redelivery, a relaunch) gets
    neither, whenever it starts and whichever process dies first. The resumer also starts with the
    try's original ``start_date`` (the api-server keeps it, ``TIRunContext.start_date``): a little
    before ``part``'s own start, by at most ``RESUME_START_SKEW``; it lived on after ``part`` last
    showed life; ``part`` reported no end of its own and was not stopped by a SIGTERM. Rows
    recorded before the audit kept ``resumed`` join nothing: a try run twice is never hidden.
    """
    if not other.get("resumed"):
        return False
    if part.get("end_source") == "listener" or part.get("terminated_at") is not None:
        return False
    if part.get("ti_id") and other.get("ti_id") and part["ti_id"] != other["ti_id"]:
        return False
    skew = part["started_at"] - other["started_at"]
    return timedelta(0) <= skew <= RESUME_START_SKEW and _own_life(other) > _own_life(part)


def _join_suspended(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A process that stopped deferred (or rescheduled) and the one that resumed its try are one
    execution: each suspended process joins the other process of its try that started nearest
    its stop (among those that recorded resuming it, when any did). A process whose suspension
    record is missing (spooled and not yet delivered) joins the process that recorded resuming its
    try (:func:`_resumed_by`)."""
    from airflow_crashsafe.audit.events import SUSPENDED

    suspended = [r for r in runs if r.get("reported_state") in SUSPENDED]
    out = [r for r in runs if r.get("reported_state") not in SUSPENDED]
    for s in suspended:
        if not out:
            return runs
        stop = s.get("ended_at") or s["started_at"]
        resumers = [k for k in range(len(out)) if out[k].get("resumed")] or range(len(out))
        i = min(resumers, key=lambda k: abs((out[k]["started_at"] - stop).total_seconds()))
        out[i] = _join(s, out[i])
    for part in sorted(out, key=lambda r: r["started_at"], reverse=True):  # the latest own start first
        if not any(r is part for r in out):
            continue  # already joined
        others = [r for r in out if r is not part and _resumed_by(part, r)]
        if others:
            into = max(others, key=lambda r: (r["started_at"], _own_life(r)))
            out = [_join(part, r) if r is into else r for r in out if r is not part]
    return out


def _fold_try(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Rows of one try: those the process itself started are executions; the rest fill them in."""
    real = [r for r in rows if r.get("start_source") == "listener"]
    rest = [r for r in rows if r.get("start_source") != "listener"]
    if not real:
        if not rest:
            return []
        merged = dict(rest[0])
        for r in rest[1:]:
            merged = merge_rows(merged, r)
        return [merged]
    out: list[dict[str, Any]] = []
    for row in real:
        merged = dict(row)
        for other in rest:
            if other.get("hostname") in ("", row.get("hostname")) or len(real) == 1:
                merged = merge_rows(merged, {**other, "hostname": row["hostname"], "pid": row["pid"]})
        out.append(merged)
    return list(_join_suspended(out))


def executions_of(rows: Iterable[Mapping[str, Any]]) -> list[Execution]:
    """The executions among one slot's rows, oldest start first."""
    by_try: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        by_try.setdefault((str(row["run_id"]), int(row["try_number"])), []).append(row)
    out = []
    for group in by_try.values():
        for r in _fold_try(group):
            if r.get("started_at") is None:
                continue  # a try that never ran (failed while queued)
            out.append(
                Execution(
                    run_id=str(r["run_id"]),
                    try_number=int(r["try_number"]),
                    hostname=str(r.get("hostname") or ""),
                    pid=int(r.get("pid") or 0),
                    ti_id=r.get("ti_id"),
                    clear_number=r.get("clear_number"),
                    started_at=r["started_at"],
                    ended_at=r.get("ended_at"),
                    end_source=r.get("end_source"),
                    state=r.get("state") or r.get("reported_state"),
                    reported_state=r.get("reported_state"),
                    last_seen_at=r.get("last_seen_at"),
                    replay_safe=r.get("replay_safe"),
                    operator=r.get("operator"),
                    terminated_at=r.get("terminated_at"),
                )
            )
    return sorted(out, key=lambda e: (e.started_at, e.try_number, e.pid))


def _replaced(prev: Execution, later: Execution) -> bool:
    """``later`` is a newer try that Airflow cannot have started as a retry of ``prev``.

    A retry's try is created only after the failing process sent its end to the api-server; the
    worker stamps that end (``ti.end_date``) before sending it and its hook records that same end,
    so a predecessor with an end or a beacon later than its successor's start was replaced while
    running. Airflow's history cannot tell the two apart: it archives a reset attempt and a retried
    one alike as ``failed`` (``record_ti`` turns any unfinished state into ``failed``) with an end
    before the successor's start (a reset's end is the archive time, a retry's the process's own).
    """
    if later.try_number <= prev.try_number or later.run_id != prev.run_id:
        return False
    return prev.alive_until > later.started_at


def _stopped_as_stale(prev: Execution, later: Execution) -> bool:
    """``prev``'s process was SIGTERMed while running and ``later`` (a newer try) started soon after."""
    if prev.terminated_at is None or later.try_number <= prev.try_number or later.run_id != prev.run_id:
        return False
    if prev.ended_at is not None and prev.end_source == "listener" and prev.terminated_at > prev.ended_at:
        return False  # SIGTERMed after its own end (task_success_overtime): not stopped while running
    return later.started_at - prev.terminated_at <= STALE_KILL_WINDOW


def _cause(prev: Execution, later: Execution) -> str:
    succeeded = "success" in (prev.reported_state, prev.state)
    if (later.clear_number or 0) > (prev.clear_number or 0):
        return "rerun_after_success" if succeeded else "rerun_after_clear"
    if _replaced(prev, later) or _stopped_as_stale(prev, later):
        return "reset_rerun"  # alive after its successor started, or stopped as stale just before
    if succeeded:
        return "rerun_after_success"
    if prev.end_source != "listener":
        # Its process never reported an end: reset, or killed with its host (the scheduler's
        # heartbeat-timeout verdict and the history's archive time are Airflow's, not its end).
        return "reset_rerun"
    if prev.state in _FAILED or prev.reported_state in _FAILED:
        return "retry_after_failure"
    return "reset_rerun"


def _overlap(earlier: Execution, later: Execution) -> float:
    end = earlier.alive_until
    if later.ended_at is not None:
        end = min(end, later.alive_until)
    return max(0.0, (end - later.started_at).total_seconds())


def rerun_of(earlier: list[Execution], later: Execution) -> Rerun:
    """Why ``later`` re-ran the slot, given every execution that started before it."""
    prev = earlier[-1]
    # One try run by two processes is a redelivery whatever the order of their ends: neither a
    # reset, a retry nor a re-run after success (those make a new try).
    same_try = prev.try_number == later.try_number and prev.run_id == later.run_id
    kinds = ["same_try_twice" if same_try else _cause(prev, later)]
    overlaps = [(_overlap(e, later), e) for e in earlier]
    longest, with_whom = max(overlaps, key=lambda pair: pair[0])
    if longest > 0:
        kinds.append("overlap")
        if with_whom is not prev:
            prev = with_whom
    order = [k for k in KINDS if k in kinds]
    return Rerun(earlier=prev, later=later, kinds=tuple(order), overlap_seconds=round(longest, 3))


def risk_of(protection: str, kinds: Iterable[str]) -> str:
    """Unprotected and re-run is risky; overlapping is the worst; a plain retry is low."""
    kinds = set(kinds)
    if protection != "unprotected" or not kinds:
        return "none"
    if "overlap" in kinds:
        return "critical"
    if kinds & {"reset_rerun", "rerun_after_clear", "rerun_after_success", "same_try_twice"}:
        return "high"
    return "low"


def _slot_partition(rows: list[Mapping[str, Any]]) -> dict[str, str]:
    known: dict[str, str] = {}
    for r in rows:
        if r.get("slot_partition"):
            known.setdefault(str(r["run_id"]), str(r["slot_partition"]))
    return known


def classify(
    rows: Iterable[Mapping[str, Any]],
    protection: Any = None,
) -> list[SlotReport]:
    """Slots that executed more than once. ``protection(slot_key, executions) -> (kind, evidence)``."""
    rows = list(rows)
    partitions = _slot_partition(rows)
    slots: dict[tuple[str, str, int, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        part = partitions.get(str(r["run_id"])) or str(r["run_id"])
        slots.setdefault((str(r["dag_id"]), str(r["task_id"]), int(r["map_index"]), part), []).append(r)
    reports = []
    for key, slot_rows in sorted(slots.items()):
        runs = executions_of(slot_rows)
        if len(runs) < 2:
            continue
        reruns = tuple(rerun_of(runs[:i], runs[i]) for i in range(1, len(runs)))
        report = SlotReport(*key, executions=tuple(runs), reruns=reruns)
        kind, evidence = protection(key, runs) if protection else ("unprotected", ())
        reports.append(
            replace(
                report, protection=kind, protection_evidence=tuple(evidence), risk=risk_of(kind, report.kinds)
            )
        )
    return reports
