"""What a fenced write records in the crashsafe store, and the error a stale attempt raises.

Recording never fails the write: a store outage is logged and the write's own outcome stands.
The event kinds (``committed``, ``skipped_committed``, ``fenced_out``, ``took_over``,
``adopted``) are read by the audit and the drill, and each is counted in Airflow's metrics
(``crashsafe.fence.*``, see :mod:`airflow_crashsafe.metrics`), even when the store is down.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_crashsafe import metrics
from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.fences import CommittedBy
from airflow_crashsafe.store.store import Store, open_store

__all__ = ["fenced_out_error", "record_commit", "record_event", "record_skip"]

log = logging.getLogger(__name__)

_METRIC_OF_KIND = {
    "committed": "crashsafe.fence.committed",
    "skipped_committed": "crashsafe.fence.skipped_committed",
    "fenced_out": "crashsafe.fence.rejected",
    "took_over": "crashsafe.fence.took_over",
    "adopted": "crashsafe.fence.adopted",
}


def record_event(
    kind: str,
    slot: Slot,
    target: str,
    attempt: Attempt,
    token: int | None,
    detail: Mapping[str, Any],
    store: Store | None = None,
) -> None:
    """Count an event in the metrics and record it in the crashsafe store; neither fails the write."""
    if kind in _METRIC_OF_KIND:
        extra = {"stage": detail["stage"]} if "stage" in detail else {}
        metrics.incr(_METRIC_OF_KIND[kind], tags=metrics.slot_tags(slot, **extra))
    try:
        (store or open_store()).record_event(kind, slot, target, attempt, token=token, detail=detail)
    except Exception:
        log.warning("crashsafe: could not record %s event for %s", kind, slot.describe(), exc_info=True)


def record_commit(
    slot: Slot,
    target: str,
    attempt: Attempt,
    token: int,
    detail: Mapping[str, Any],
    store: Store | None = None,
) -> None:
    """Log and record that this attempt's write committed (client-driven or server-side)."""
    log.info(
        "crashsafe: committed %s (target %r) as %s, token %s.",
        slot.describe(),
        target,
        attempt.describe(),
        token,
    )
    record_event("committed", slot, target, attempt, token, detail, store)


def record_skip(
    slot: Slot, target: str, attempt: Attempt, committed: CommittedBy, store: Store | None = None
) -> None:
    """Record that this attempt found the slot committed and did not redo the work."""
    detail = {"committed_try": committed.try_number, "committed_ti_id": committed.ti_id}
    record_event("skipped_committed", slot, target, attempt, None, detail, store)


def fenced_out_error(
    db: Db,
    store: Store | None,
    slot: Slot,
    target: str,
    attempt: Attempt,
    token: int | None,
    newest: fences.FenceState | None,
    stage: str,
) -> FencedOut:
    """Count and record that ``attempt`` was fenced out at ``stage``; the error to raise."""
    try:
        fences.record_rejection(db, slot, target)
    except Exception:
        log.warning("crashsafe: could not count the rejection on the fence row", exc_info=True)
    newest = newest or fences.read_fence(db, slot, target)
    holder = f"try {newest.issued_try} (ti {newest.issued_ti_id})" if newest else "a newer attempt"
    record_event(
        "fenced_out",
        slot,
        target,
        attempt,
        token,
        {
            "stage": stage,
            "newest_token": newest.issued_token if newest else None,
            "newest_try": newest.issued_try if newest else None,
        },
        store,
    )
    return FencedOut(
        f"Stale attempt {attempt.describe()} of {slot.describe()} (target {target!r}) was fenced "
        f"out at {stage}: {holder} holds the slot. Nothing this attempt wrote was committed; the "
        "newer attempt's output stands. No action needed unless this repeats.",
        slot=slot,
        token=token,
        newest_token=newest.issued_token if newest else None,
    )
