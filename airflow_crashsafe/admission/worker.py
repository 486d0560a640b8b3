"""Recovery admission for code that cannot defer: wait for a place in the worker, bounded and logged.

``effect()``, ``fenced_transaction`` and any TaskFlow code use :func:`recovery_admission`; the
operators share its pieces (:func:`prepare`, :func:`admitted`) and wait deferred instead
(:mod:`airflow_crashsafe.admission.operator`). See docs/design.md, "Recovery admission".
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe import config
from airflow_crashsafe.admission.lease import Lease, jittered, poll, release, take
from airflow_crashsafe.admission.rules import (
    Deadline,
    Verdict,
    deadline_epoch,
    downstream_count,
    recovery_verdict,
)
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.identity import attempt_from_context, current_context, slot_from_context
from airflow_crashsafe.store import admission as sql
from airflow_crashsafe.store.admission import Request
from airflow_crashsafe.store.store import Store, open_store

__all__ = ["Asking", "admitted", "budget", "prepare", "recovery_admission", "wait_for_place"]

log = logging.getLogger(__name__)


def budget(concurrency: int | None) -> int:
    """The recovery budget: ``concurrency`` if given, else ``[crashsafe] recovery_concurrency``."""
    if concurrency is None:
        return config.recovery_concurrency()
    if int(concurrency) < 0:
        raise ConfigurationError(f"recovery_concurrency={concurrency}: give 0 (off) or a positive number.")
    return int(concurrency)


@dataclass(frozen=True)
class Asking:
    """A recovery re-run about to ask for a place: what it asks, of which store, and why."""

    store: Store
    request: Request
    k: int
    verdict: Verdict
    context: Mapping[str, Any]


def prepare(
    resource: str,
    context: Mapping[str, Any],
    *,
    concurrency: int | None,
    deadline: Deadline | None,
    store: Store | None,
) -> Asking | None:
    """What a re-run asks for, or None when it must not wait (admission off, or not a recovery re-run)."""
    k = budget(concurrency)
    if k == 0:
        return None
    store = store or open_store()
    verdict = recovery_verdict(context, store)
    if not verdict.recovery:
        return None
    slot, attempt = slot_from_context(context), attempt_from_context(context)
    request = Request(
        resource=resource,
        deadline_at=deadline_epoch(deadline, context),
        downstream=downstream_count(context),
        lease_seconds=config.recovery_lease_seconds(),
        dag_id=slot.dag_id,
        task_id=slot.task_id,
        map_index=slot.map_index,
        run_id=attempt.run_id,
        try_number=attempt.try_number,
    )
    return Asking(store, request, k, verdict, context)


def admitted(asking: Asking, holder: int, place: int, waited: float) -> Lease:
    """Start holding an admitted place: log it and, after a wait, record ``admission_waited``."""
    resource = asking.request.resource
    log.info(
        "crashsafe: admitted after %.1f s (place %d of %d for resource %r): %s.",
        waited,
        place,
        asking.k,
        resource,
        asking.verdict.reason,
    )
    if waited > 0:
        try:
            slot, attempt = slot_from_context(asking.context), attempt_from_context(asking.context)
            detail = {"waited_seconds": round(waited, 3), "place": place, "k": asking.k, "resource": resource}
            asking.store.record_event(sql.WAITED_EVENT, slot, resource, attempt, detail=detail)
        except Exception as exc:  # the audit's record must not fail the work it describes
            log.warning("crashsafe: recording the admission wait failed (%s)", exc)
    return Lease(
        asking.store,
        holder,
        resource=resource,
        place=place,
        k=asking.k,
        waited=waited,
        lease_seconds=asking.request.lease_seconds,
    )


def wait_for_place(asking: Asking, max_wait: float) -> Lease | None:
    """Wait in this worker (polling with jitter) for a place, at most ``max_wait`` seconds."""
    me, pid = socket.gethostname(), os.getpid()
    started = time.monotonic()
    ticket = take(asking.store, asking.request, asking.k, hostname=me, pid=pid)
    if ticket.place is not None:
        return admitted(asking, ticket.holder, ticket.place, 0.0)
    holder = ticket.holder
    log.info(
        "crashsafe: waiting for a recovery place for resource %r (budget %d; %s).",
        asking.request.resource,
        asking.k,
        asking.verdict.reason,
    )
    n = 0
    while time.monotonic() - started < max_wait:
        time.sleep(jittered(n))
        n += 1
        try:
            place = poll(asking.store, holder, asking.request.resource, asking.k, hostname=me, pid=pid)
        except LookupError:  # our row was dropped (the store lost it): queue again
            ticket = take(asking.store, asking.request, asking.k, hostname=me, pid=pid)
            holder, place = ticket.holder, ticket.place
        if place is not None:
            return admitted(asking, holder, place, time.monotonic() - started)
    release(asking.store, holder)
    log.warning(
        "crashsafe: no recovery place for resource %r within %.0f s; going ahead over the budget.",
        asking.request.resource,
        max_wait,
    )
    return None


@contextmanager
def recovery_admission(
    resource: str,
    *,
    context: Mapping[str, Any] | None = None,
    concurrency: int | None = None,
    deadline: Deadline | None = None,
    max_wait: float | None = None,
    store: Store | None = None,
) -> Iterator[Lease | None]:
    """Hold a recovery place of ``resource`` for the block, if this run is a recovery re-run.

    ::

        with recovery_admission("warehouse", deadline="06:00"):
            rebuild_aggregates()

    A first try (or a retry after the task's own failure) runs at once and gets ``None``. A
    recovery re-run waits in the worker (polling with jitter, at most ``max_wait`` seconds, default
    ``[crashsafe] recovery_wait_seconds``, then goes ahead over the budget) and gets its
    :class:`~airflow_crashsafe.admission.lease.Lease`, released when the block ends.

    :param resource: what the budget limits (a connection id, a warehouse, an API).
    :param concurrency: the budget; default ``[crashsafe] recovery_concurrency``; 0: never wait.
    :param deadline: when the run must be done (datetime, time of day, or ISO text): sooner goes first.
    """
    ctx = current_context(context)
    lease: Lease | None = None
    try:
        asking = prepare(resource, ctx, concurrency=concurrency, deadline=deadline, store=store)
        if asking is not None:
            bound = config.recovery_wait_seconds() if max_wait is None else float(max_wait)
            lease = wait_for_place(asking, bound)
    except ConfigurationError:
        raise
    except Exception as exc:  # admission damps load; a store outage must not stop the work
        log.warning("crashsafe: recovery admission unavailable (%s); going ahead without a place.", exc)
    try:
        yield lease
    finally:
        if lease is not None:
            lease.release()
