"""The one decision before a fenced SQL write: run it, skip it, adopt a predecessor's, or wait.

:func:`decide` conducts the fence protocol for an operator (docs/design.md, "Fencing token" and
"Server-side unit and adoption"):

1. where writes run as server-side units, probe whether a predecessor's unit is still in flight;
   if so, and adoption is on and the wait has not timed out, :class:`Wait` for it;
2. take a fencing token; a slot already committed in this clear generation is :class:`Adopt`
   (the awaited unit committed it) or :class:`Skip` (someone else did);
3. a newer attempt holding the slot raises :class:`~airflow_crashsafe.errors.FencedOut`;
4. otherwise cancel any stale unit still holding the slot (``took_over``) and :class:`Run`.

Every outcome is logged and recorded here; the operator only defers on ``Wait`` and hands
``Run`` to its dialect's runner (:mod:`airflow_crashsafe.fencing.runners`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.fencing.events import fenced_out_error, record_event, record_skip
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences, units
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.fences import CommittedBy
from airflow_crashsafe.store.units import LockKey, Unit

__all__ = ["Adopt", "Adoption", "Decision", "Resume", "Run", "Skip", "Wait", "decide"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """What a deferred attempt brings back from the triggerer (nothing on a first run)."""

    awaited: Mapping[str, Any] | None = None  # the unit waited for, as ``Unit.as_dict()``
    deadline: float | None = None  # UNIX time when the wait ends
    timed_out: bool = False  # the trigger fired at the deadline, not at the unit's end
    take_over: bool = False  # no triggerer to wait in and the operator said to take over
    # The deferral timed out unanswered (a stalled triggerer): the wait's deadline is gone with its
    # kwargs, so it counts from the unit's start; the wait itself goes on without the triggerer.
    triggerer_silent: bool = False

    @classmethod
    def after_trigger(
        cls, awaited: Mapping[str, Any], deadline: float, event: Mapping[str, Any] | None
    ) -> Resume:
        """From the kwargs of the deferral and the trigger's event payload."""
        timed_out = (event or {}).get("status") == "timeout"
        return cls(awaited=dict(awaited), deadline=float(deadline), timed_out=timed_out)


@dataclass(frozen=True)
class Adoption:
    """Whether to wait for a predecessor's in-flight unit, and for how long."""

    enabled: bool
    timeout_seconds: float


@dataclass(frozen=True)
class Run:
    """Do the write: ``token`` is this attempt's, newest when issued."""

    slot: Slot
    target: str
    attempt: Attempt
    token: int


@dataclass(frozen=True)
class Skip:
    """The slot is already committed in this clear generation by ``by``; nothing to run."""

    by: str

    @property
    def result(self) -> dict[str, Any]:
        return {"rows": None, "token": None, "committed_by": self.by, "skipped": True}


@dataclass(frozen=True)
class Adopt:
    """The awaited unit committed the slot: its ``result`` is this attempt's."""

    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Wait:
    """A predecessor's unit is in flight: wait for its ``lock`` until ``deadline``.

    Where: :func:`airflow_crashsafe.fencing.triggerer.await_unit` (deferred, in the worker, or not).
    """

    unit: Unit
    deadline: float
    lock: LockKey


Decision = Run | Skip | Adopt | Wait


def decide(
    db: Db,
    slot: Slot,
    target: str,
    attempt: Attempt,
    resume: Resume,
    adoption: Adoption,
    *,
    in_flight_units: bool,
) -> Decision:
    """Decide, log and record what this attempt does about (slot, target).

    :param in_flight_units: the target's writes run as server-side units (PostgreSQL), which
        may still be running from an earlier attempt; without them there is nothing to probe.
    :raises FencedOut: a newer attempt holds the slot.
    """
    seen = units.Probe(free=True, unit=None)
    if in_flight_units:
        # The probe also keeps this connection's unit running should its client die (PG 14+).
        seen = units.probe(db, slot, target, keep_running=db.driver_server_version() >= 140000)
    stop_waiting = resume.timed_out or resume.take_over
    if adoption.enabled and not stop_waiting and seen.unit is not None:
        deadline = resume.deadline or time.time() + adoption.timeout_seconds
        if resume.triggerer_silent:
            deadline = _started(seen.unit) + adoption.timeout_seconds
        return _wait(slot, target, seen.unit, deadline)
    issue = fences.issue_token(db, slot, target, attempt)
    if issue.already_committed is not None:
        awaited = resume.awaited
        if awaited and int(awaited["token"]) == issue.already_committed.token:
            return _adopt(db, slot, target, attempt, awaited, issue.already_committed)
        record_skip(slot, target, attempt, issue.already_committed)
        return _skip(slot, target, issue.already_committed.describe())
    if issue.token is None:
        raise fenced_out_error(db, None, slot, target, attempt, None, issue.newer, "start")
    token = issue.token
    # Whatever unit of this slot still runs is stale now: stop it rather than queue behind it.
    # (One that started between the probe and our token fails its start check at once.)
    stale = in_flight_units and (not seen.free or stop_waiting)
    cancelled = units.cancel_holder(db, slot, target) if stale else []
    if cancelled or stop_waiting:
        log.warning(
            "crashsafe: %s: took the slot over from %s (cancelled backend(s) %s)",
            slot.describe(),
            (resume.awaited or {}).get("ti_id", "a stale unit"),
            cancelled or "none still running",
        )
        record_event(
            "took_over",
            slot,
            target,
            attempt,
            token,
            {
                "cancelled_backends": cancelled,
                "timed_out": resume.timed_out,
                "no_triggerer": resume.take_over,
            },
        )
    return Run(slot, target, attempt, token)


def _started(unit: Unit) -> float:
    """The unit's start as UNIX time (now when the database gave no usable time)."""
    started = unit.started_at
    if isinstance(started, str):
        try:
            started = datetime.fromisoformat(started)
        except ValueError:
            return time.time()
    if not isinstance(started, datetime):
        return time.time()
    return (started if started.tzinfo else started.replace(tzinfo=timezone.utc)).timestamp()


def _wait(slot: Slot, target: str, running: Unit, deadline: float) -> Wait:
    log.info(
        "crashsafe: %s (target %s): the unit of %s is still running server-side (since %s); "
        "waiting for it to adopt its commit instead of redoing the work (until %s).",
        slot.describe(),
        target,
        running.describe(),
        running.started_at,
        datetime.fromtimestamp(deadline, tz=timezone.utc).isoformat(timespec="seconds"),
    )
    return Wait(running, deadline, units.lock_key(slot, target))


def _skip(slot: Slot, target: str, by: str) -> Skip:
    log.info(
        "crashsafe: %s (target %s) was already committed by %s in this clear generation; "
        "not running the load again.",
        slot.describe(),
        target,
        by,
    )
    return Skip(by)


def _adopt(
    db: Db, slot: Slot, target: str, attempt: Attempt, awaited: Mapping[str, Any], committed: CommittedBy
) -> Adopt:
    unit = units.unit_by_id(db, str(awaited["unit_id"]))
    result = dict(unit.result) if unit is not None and unit.state == "committed" else {}
    by = committed.describe()
    log.info(
        "crashsafe: %s (target %s): adopted the work of %s, which committed server-side; "
        "nothing was run again.",
        slot.describe(),
        target,
        by,
    )
    record_event(
        "adopted",
        slot,
        target,
        attempt,
        committed.token,
        {
            "adopted_try": committed.try_number,
            "adopted_ti_id": committed.ti_id,
            "unit_id": awaited["unit_id"],
        },
    )
    return Adopt(
        {
            **result,
            "token": None,
            "committed_by": by,
            "skipped": True,
            "adopted": True,
            "adopted_from": dict(awaited),
        }
    )
