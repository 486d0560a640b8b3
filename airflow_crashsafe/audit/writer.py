"""Deliver audit events to the store from a background thread, under a hard time limit.

The hook thread (the task itself) hands an event over and waits at most ``timeout`` seconds; an
event not stored by then - store down, slow or hanging - is appended to the local spool, and the
thread carries on. While a write is still stuck, later events go straight to the spool. After each
successful write the thread drains the spool. Nothing here raises into the caller.

The store side is an :class:`AuditSink` (in production
:class:`airflow_crashsafe.store.attempts.AttemptLog`): ``apply`` stores one event, ``touch`` a batch
of liveness beacons. Every ``beacon_interval`` the thread refreshes ``last_seen_at`` of the attempts
running in this process (one cheap UPDATE each), so a reset attempt that is SIGKILLed later leaves
proof of how long it really ran. A stale attempt is stopped by its supervisor with SIGTERM and
SIGKILLed 5 s later; the listener's SIGTERM handler calls :meth:`Writer.note_terminated`, after
which the thread stores the SIGTERM moment (spooled if the store is down) and beacons every
``dying_interval``, so the recorded end of a killed attempt is within that of its real death and
an overlap with its successor is measured, not guessed.

A task process ends with ``os._exit()``, which kills this daemon thread wherever it is: in a write
the hook gave up waiting for, or half-way through draining a spool file it had claimed (that file
then sat hidden from every drainer for five minutes). So the listener's ``before_stopping`` hook
calls :meth:`Writer.close` last: it waits, up to ``stop_timeout``, for the write in flight and the
drain under way, and a drain still running at that limit puts back what it has not delivered. A
process killed even so leaves its claimed file to the next drainer at once (the file names its
drainer's pid; see :mod:`~airflow_crashsafe.audit.spool`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Protocol

from airflow_crashsafe import metrics
from airflow_crashsafe.audit import events as ev
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.audit.spool import Spool, is_bad_data

__all__ = ["AuditSink", "Writer"]

log = logging.getLogger(__name__)


class AuditSink(Protocol):
    """Where the writer stores events. Each method raises on failure; the writer never lets it out."""

    def apply(self, event: AttemptEvent) -> None:
        """Store one event (merged into its execution's record; delivering it twice is harmless)."""

    def touch(self, beacons: Sequence[AttemptEvent]) -> int:
        """Refresh the liveness of already stored executions; how many were found."""

    def discard_connection(self) -> None:
        """A write failed: drop the connection it used, so the next write starts afresh."""

    def release(self) -> None:
        """The writer's thread is ending: close whatever this thread holds (its connection)."""


@dataclass
class _Job:
    event: AttemptEvent
    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False


class Writer:
    """One per process: hands events to ``sink`` from its own thread, spooling what it cannot store."""

    def __init__(
        self,
        sink: AuditSink,
        spool: Spool,
        *,
        timeout: float = 0.5,
        beacon_interval: float = 5.0,
        dying_interval: float = 0.5,
        tick: float = 0.25,
        stop_timeout: float = 2.0,
    ) -> None:
        self.sink = sink
        self.spool = spool
        self.timeout = timeout
        self.beacon_interval = beacon_interval
        self.dying_interval = dying_interval
        self._tick = tick
        self.stop_timeout = stop_timeout
        # Set by a signal handler, read by the thread: a plain attribute, no lock (see note_terminated).
        self._terminated_at: datetime | None = None
        self._termination_stored = False
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._busy = threading.Event()
        # Work submitted or begun and not finished (a job with its drain, a beacon): close() waits for 0.
        self._work = 0
        self._idle = threading.Condition()
        self._stopping = threading.Event()
        self._stop_at = float("inf")
        self._running: dict[tuple[object, ...], AttemptEvent] = {}
        self._lock = threading.Lock()
        self.pid = os.getpid()
        self.spooled = 0
        self._thread = threading.Thread(target=self._loop, name="crashsafe-audit", daemon=True)
        self._thread.start()

    def submit(self, event: AttemptEvent, *, timeout: float | None = None) -> bool:
        """Store ``event`` within the time limit, else spool it. True if it reached the store.

        ``timeout`` (default: the writer's) also bounds the wait for a write still in flight; without
        it, an event submitted while a write is stuck goes straight to the spool.
        """
        try:
            self._track(event)
            limit = self.timeout if timeout is None else timeout
            deadline = time.monotonic() + limit
            if self._busy.is_set() and timeout is not None:
                self._wait_idle(deadline, lambda: not self._busy.is_set())
            if self._busy.is_set() or not self._thread.is_alive():
                self._spool([event])
                return False
            job = _Job(event)
            self._busy.set()
            self._begin()
            self._queue.put(job)
            if job.done.wait(max(0.0, deadline - time.monotonic())) and job.ok:
                return True
            self._spool([event])  # delivered twice if the write completes later: merges are idempotent
            return False
        except Exception:
            log.warning("crashsafe audit: could not record %s", event.describe(), exc_info=True)
            return False

    def close(self, timeout: float | None = None) -> bool:
        """The process is about to exit: finish the write in flight and the drain under way.

        Waits at most ``timeout`` (default ``stop_timeout``); a drain still running then stops
        between two events and puts the rest back in the spool. Starts no beacon afterwards, and
        the writer's thread ends once the limit has passed with nothing queued (a later ``submit``
        spools). True when nothing was left running. Never raises.
        """
        try:
            limit = self.stop_timeout if timeout is None else timeout
            self._stop_at = time.monotonic() + limit
            self._stopping.set()
            # A little beyond the limit: a drain told to stop puts its rest back (local file I/O).
            return self._wait_idle(self._stop_at + min(0.5, max(limit, 0.05)), lambda: self._work == 0)
        except Exception:
            log.debug("crashsafe audit: closing the writer failed", exc_info=True)
            return False

    def _wait_idle(self, deadline: float, done: Callable[[], bool]) -> bool:
        with self._idle:
            return self._idle.wait_for(done, timeout=max(0.0, deadline - time.monotonic()))

    def _begin(self) -> None:
        with self._idle:
            self._work += 1

    def _end(self) -> None:
        with self._idle:
            self._work -= 1
            self._idle.notify_all()

    def _stop_draining(self) -> bool:
        return self._stopping.is_set() and time.monotonic() >= self._stop_at

    def note_terminated(self) -> None:
        """This process got SIGTERM. Safe inside a signal handler: one attribute store, no lock.

        (A handler runs between two bytecodes of the main thread, which may hold any lock the
        writer uses; taking one here could deadlock the task.)
        """
        if self._terminated_at is None:
            self._terminated_at = datetime.now(timezone.utc)

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
        metrics.incr("crashsafe.audit.spooled", len(events))
        self._gauge_depth()

    def _gauge_depth(self) -> None:
        """The spool's depth as a gauge, after it grew or was drained (both rare: the store failed)."""
        try:
            metrics.gauge("crashsafe.audit.spool_depth", self.spool.count())
        except OSError:
            log.debug("crashsafe audit: could not count the spool", exc_info=True)

    def _loop(self) -> None:
        try:
            self._serve()
        finally:
            with contextlib.suppress(Exception):
                self.sink.release()  # this thread's store connection ends with it

    def _serve(self) -> None:
        next_beacon = time.monotonic() + self.beacon_interval
        while not (self._stop_draining() and self._queue.empty()):
            # Wake at least every tick: a SIGTERM only sets an attribute (see note_terminated).
            wait = max(0.0, min(self._tick, next_beacon - time.monotonic()))
            with contextlib.suppress(queue.Empty):
                job = self._queue.get(timeout=wait)
                try:
                    self._run(job)
                finally:
                    self._end()
            if self._terminated_at is not None and not self._termination_stored:
                self._termination_stored = True
                self._begin()
                try:
                    self._store_termination(self._terminated_at)
                finally:
                    self._end()
                next_beacon = time.monotonic() + self.dying_interval
            elif time.monotonic() >= next_beacon and not self._stopping.is_set():
                self._begin()
                try:
                    self._beacon()
                finally:
                    self._end()
                dying = self._terminated_at is not None
                next_beacon = time.monotonic() + (self.dying_interval if dying else self.beacon_interval)

    def _run(self, job: _Job) -> None:
        try:
            self.sink.apply(job.event)
            job.ok = True
        except Exception as exc:
            log.warning(
                "crashsafe audit: store unavailable (%s); %s spooled",
                type(exc).__name__,
                job.event.describe(),
            )
            if not is_bad_data(exc):  # the connection is fine; the spool quarantines the event
                self._failed()
        finally:
            job.done.set()
            self._busy.clear()
            with self._idle:  # a final event waiting for this write may go now
                self._idle.notify_all()
        if job.ok:
            self._drain()

    def _store_termination(self, at: datetime) -> None:
        with self._lock:
            running = list(self._running.values())
        for event in running:
            marked = ev.seen(event, now=at, terminated=True)
            try:
                self.sink.apply(marked)
            except Exception:
                self._failed()
                try:
                    self._spool([marked])
                except Exception:
                    log.warning("crashsafe audit: could not spool %s", marked.describe(), exc_info=True)

    def _failed(self) -> None:
        try:
            self.sink.discard_connection()
        except Exception:
            log.debug("crashsafe audit: discarding the store connection failed", exc_info=True)

    def _drain(self) -> None:
        try:
            if self.spool.pending_files():
                delivered = self.spool.drain(self.sink.apply, stop=self._stop_draining)
                if delivered:
                    log.info("crashsafe audit: delivered %d spooled events", delivered)
                self._gauge_depth()
        except Exception:
            log.warning("crashsafe audit: spooled events kept for later", exc_info=True)
            self._failed()

    def _beacon(self) -> None:
        """Best effort: a beacon that fails is not spooled, the next one says more."""
        with self._lock:
            beacons = [ev.seen(event) for event in self._running.values()]
        if not beacons:
            return
        try:
            self.sink.touch(beacons)
        except Exception:
            self._failed()
