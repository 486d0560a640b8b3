"""Wait for a predecessor's in-flight unit where the wait can end: deferred, in this worker, or not.

A deferral is answered only by a running triggerer. Deferred with none there (or with the
api-server reporting it dead) the re-run would sit for the whole adoption timeout, hours by
default. So before deferring, the api-server's unauthenticated ``/api/v2/monitor/health`` is read
once (bounded, cached a few seconds per process): the re-run defers only while a triggerer
heartbeats, with the remaining adoption time as the deferral's ``timeout``. Otherwise the
operator's ``adoption_without_triggerer`` decides: ``"wait"`` polls the unit's end from this
worker (the trigger's own check, holding the worker slot, until the same deadline) and
``"take_over"`` cancels the unit and redoes the work now. The log says which
(docs/design.md, "Server-side unit and adoption").

A triggerer that heartbeats but runs no trigger (stalled) is not seen in its health, so the
deferral never trusts it for long: while more than ``[crashsafe] triggerer_answer_seconds`` of
the wait is left, the trigger checks in after that long (the task resumes, looks at the unit and
defers anew), and the deferral's ``timeout`` is twice that. A stalled triggerer never fires the
check-in; the scheduler ends the deferral at its timeout, and the re-run, resumed with
``triggerer_silent``, waits in the worker or takes over as the operator says, and logs which.
The alerting DAG's canary, which defers too, stalls and pages as well.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing.decision import Resume, Wait
from airflow_crashsafe.triggers.unit import UnitEndTrigger

__all__ = [
    "ADOPTION_WITHOUT_TRIGGERER",
    "HEALTH_CACHE_SECONDS",
    "HEALTH_TIMEOUT_SECONDS",
    "TRIGGERER_THRESHOLD_SECONDS",
    "TriggererHealth",
    "await_unit",
    "check_without_triggerer",
    "forget_triggerer_health",
    "triggerer_health",
]

log = logging.getLogger(__name__)

#: What a re-run does about an in-flight unit when no triggerer would answer a deferral.
ADOPTION_WITHOUT_TRIGGERER = ("wait", "take_over")
#: How long one reading of the api-server's health is reused by this process.
HEALTH_CACHE_SECONDS = 5.0
#: Connect and read timeout of that one GET (the body is a few hundred bytes).
HEALTH_TIMEOUT_SECONDS = 2.0
#: A triggerer whose newest heartbeat is older is not there (Airflow's own verdict, after 30 s by
#: default, applies first).
TRIGGERER_THRESHOLD_SECONDS = 60.0

#: Deferring hands the wait to the triggerer: ``defer(trigger, kwargs, timeout)`` never returns.
Defer = Callable[[UnitEndTrigger, dict[str, Any], timedelta], None]


@dataclass(frozen=True)
class TriggererHealth:
    """Whether a triggerer heartbeats, and the words for the log."""

    alive: bool
    reason: str


_cache: dict[str, tuple[float, TriggererHealth]] = {}
_cache_lock = threading.Lock()


def triggerer_health(api_url: str | None = None) -> TriggererHealth:
    """One bounded read of the api-server's health, reused for :data:`HEALTH_CACHE_SECONDS`."""
    url = config.api_url(api_url)
    with _cache_lock:
        cached = _cache.get(url)
        if cached is not None and time.monotonic() - cached[0] < HEALTH_CACHE_SECONDS:
            return cached[1]
    health = _read(url)
    with _cache_lock:
        _cache[url] = (time.monotonic(), health)
    return health


def forget_triggerer_health() -> None:
    """Drop cached readings (tests change the answer between cases)."""
    with _cache_lock:
        _cache.clear()


def _read(url: str) -> TriggererHealth:
    from airflow_crashsafe.sensors.heartbeat import read_health, stale_components

    observation = read_health(url, timeout=HEALTH_TIMEOUT_SECONDS, now=datetime.now(timezone.utc))
    problem = stale_components(observation, ["triggerer"], TRIGGERER_THRESHOLD_SECONDS).get("triggerer")
    if problem is not None:
        return TriggererHealth(False, f"triggerer at {url}: {problem}")
    beat = max(j.latest_heartbeat for j in observation.jobs_of("triggerer") if j.latest_heartbeat)
    age = (observation.at - beat).total_seconds()
    return TriggererHealth(True, f"triggerer at {url} heartbeat {age:.0f} s ago")


def check_without_triggerer(value: str | None, task_id: Any = None) -> str | None:
    """``value`` if it is one of :data:`ADOPTION_WITHOUT_TRIGGERER` (or None: the option)."""
    if value is not None and value not in ADOPTION_WITHOUT_TRIGGERER:
        choices = ADOPTION_WITHOUT_TRIGGERER
        raise ConfigurationError(
            f"adoption_without_triggerer={value!r} of {task_id!r}: choose one of {choices}."
        )
    return value


def await_unit(
    wait: Wait, *, conn_id: str, without_triggerer: str, defer: Defer, triggerer_silent: bool = False
) -> Resume:
    """Defer while a triggerer heartbeats (and answered); else wait here or take over.

    What the re-run resumes with. ``triggerer_silent``: the last deferral timed out unanswered.
    """
    awaited = wait.unit.as_dict()
    until = datetime.fromtimestamp(wait.deadline, tz=timezone.utc).isoformat(timespec="seconds")
    trigger = UnitEndTrigger(conn_id=conn_id, lock=[wait.lock.k1, wait.lock.k2], deadline=wait.deadline)
    answer = config.triggerer_answer_seconds()
    if triggerer_silent:
        health = TriggererHealth(
            False, f"the triggerer did not answer the last deferral within {2 * answer:g} s: stalled?"
        )
    else:
        health = triggerer_health()
    if health.alive:
        remaining = max(1.0, wait.deadline - time.time())
        check_in = remaining > answer
        deferred = UnitEndTrigger(
            conn_id=conn_id,
            lock=[wait.lock.k1, wait.lock.k2],
            deadline=wait.deadline,
            check_in_at=time.time() + answer if check_in else None,
        )
        log.info(
            "crashsafe: deferring to the triggerer (%s) until %s; it must answer within %g s.",
            health.reason,
            until,
            2 * answer if check_in else remaining + answer,
        )
        timeout = timedelta(seconds=2 * answer if check_in else remaining + answer)
        defer(deferred, {"awaited": awaited, "deadline": wait.deadline}, timeout)
    if without_triggerer == "take_over":
        log.warning(
            "crashsafe: no triggerer to wait in (%s); adoption_without_triggerer='take_over': "
            "cancelling the unit of %s and redoing the work now.",
            health.reason,
            wait.unit.describe(),
        )
        return Resume(awaited=awaited, deadline=wait.deadline, take_over=True)
    log.warning(
        "crashsafe: no triggerer to wait in (%s); adoption_without_triggerer='wait': waiting in this "
        "worker, holding its slot, for the unit of %s to end (until %s).",
        health.reason,
        wait.unit.describe(),
        until,
    )
    event = trigger.wait_here()
    return Resume.after_trigger(awaited, wait.deadline, event)
