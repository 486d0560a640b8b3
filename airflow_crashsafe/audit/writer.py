"""Deliver audit events to the store from a background thread, under a hard time limit.

The hook thread (the task itself) hands an event over and waits at most ``timeout`` seconds; an
event not stored by then - store down, slow or hanging - is appended to the local spool, and the
thread carries on. While a write is still stuck, later events go straight to the spool. After each
successful write the thread drains the spool. Between events it refreshes ``last_seen_at`` of the
attempts running in this process (a liveness beacon: a reset attempt that is SIGKILLed later
leaves proof of how long it really ran). Nothing here raises into the caller.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from airflow_crashsafe.audit import events as ev
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.audit.spool import Spool

__all__ = ["Writer"]

log = logging.getLogger(__name__)


@dataclass
class _Job:
    event: AttemptEvent
    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False


class Writer:
    """One per process. ``apply(event)`` stores one event (raises on failure)."""

    def __init__(
        self,
        apply: Callable[[AttemptEvent], None],
        spool: Spool,
        *,
        timeout: float = 0.5,
        beacon_interval: float = 5.0,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._apply = apply
        self.spool = spool
        self.timeout = timeout
        self.beacon_interval = beacon_interval
        self._on_failure = on_failure
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._busy = threading.Event()
        self._running: dict[tuple[object, ...], AttemptEvent] = {}
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.spooled = 0
        self._thread = threading.Thread(target=self._loop, name="crashsafe-audit", daemon=True)
        self._thread.start()

    def submit(self, event: AttemptEvent) -> bool:
        """Store ``event`` within the time limit, else spool it. True if it reached the store."""
        try:
            self._track(event)
            if self._busy.is_set() or not self._thread.is_alive():
                self._spool([event])
                return False
            job = _Job(event)
            self._busy.set()
            self._queue.put(job)
            if job.done.wait(self.timeout) and job.ok:
                return True
            self._spool([event])  # delivered twice if the write completes later: merges are idempotent
            return False
        except Exception:
            log.warning("crashsafe audit: could not record %s", event.describe(), exc_info=True)
            return False

    def _track(self, event: AttemptEvent) -> None:
        key = (event.dag_id, event.task_id, event.map_index, event.run_id, event.try_number, event.pid)
        with self._lock:
            if event.ended_at is not None:
                self._running.pop(key, None)
            elif event.started_at is not None and event.source == "listener":
                self._running[key] = event

    def _spool(self, events: list[AttemptEvent]) -> None:
        self.spool.append(events)
        self.spooled += len(events)

    def _loop(self) -> None:
        while True:
            try:
                job = self._queue.get(timeout=self.beacon_interval)
            except queue.Empty:
                self._beacon()
                continue
            try:
                self._apply(job.event)
                job.ok = True
            except Exception as exc:
                log.warning(
                    "crashsafe audit: store unavailable (%s); %s spooled",
                    type(exc).__name__,
                    job.event.describe(),
                )
                self._failed()
            finally:
                job.done.set()
                self._busy.clear()
            if job.ok:
                self._drain()

    def _failed(self) -> None:
        if self._on_failure is not None:
            try:
                self._on_failure()
            except Exception:
                log.debug("crashsafe audit: discarding the store connection failed", exc_info=True)

    def _drain(self) -> None:
        try:
            if self.spool.pending_files():
                delivered = self.spool.drain(self._apply)
                if delivered:
                    log.info("crashsafe audit: delivered %d spooled events", delivered)
        except Exception:
            log.warning("crashsafe audit: spooled events kept for later", exc_info=True)
            self._failed()

    def _beacon(self) -> None:
        with self._lock:
            running = list(self._running.values())
        for event in running:
            try:
                self._apply(ev.seen(event))
            except Exception:
                self._failed()
                return
