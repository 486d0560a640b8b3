"""Taking, holding and giving back a recovery place (docs/design.md, "Recovery admission").

A :class:`Lease` is a place this process holds: a daemon thread refreshes its beacon several times
per ``lease_seconds`` while the work runs, and :meth:`Lease.release` deletes it at the end, success
or failure. A holder killed without releasing stops counting as soon as a process of its host
notices its pid is gone, or, from another host, once its beacon is older than its lease.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
from dataclasses import dataclass

from airflow_crashsafe.store import admission as sql
from airflow_crashsafe.store.admission import Request
from airflow_crashsafe.store.store import Store

__all__ = ["Lease", "Ticket", "jittered", "poll", "release", "take"]

log = logging.getLogger(__name__)

#: First pause between polls for a place; it grows to :data:`MAX_POLL_SECONDS`, each one jittered.
FIRST_POLL_SECONDS = 0.2
MAX_POLL_SECONDS = 5.0


def jittered(attempt: int, *, first: float = FIRST_POLL_SECONDS, cap: float = MAX_POLL_SECONDS) -> float:
    """The pause before poll number ``attempt``: growing, capped, and spread ±50 % so waiters do not align."""
    return min(cap, first * 1.5**attempt) * random.uniform(0.5, 1.5)


@dataclass(frozen=True)
class Ticket:
    """A waiting or admitted row: its id, and its place (1..k) once admitted."""

    holder: int
    place: int | None


def take(store: Store, request: Request, k: int, *, hostname: str, pid: int) -> Ticket:
    """Join the queue of ``request.resource`` and take a place at once if one is free for it."""
    with store.transaction() as db:
        holder = sql.enqueue(db, request, hostname=hostname, pid=pid)
        place = sql.try_admit(db, holder, request.resource, k, hostname=hostname, pid=pid)
    return Ticket(holder, place)


def poll(store: Store, holder: int, resource: str, k: int, *, hostname: str, pid: int) -> int | None:
    """One more try for waiting row ``holder``: drop this host's dead holders, then admit if a place is free.

    Returns the place, or None; raises :class:`LookupError` when the row is gone (so re-enqueue).
    """
    # Imported here: effects/ imports this package (effect() waits for a place), so not at the top.
    from airflow_crashsafe.effects.in_flight import pid_running

    with store.transaction() as db:
        sql.reap_dead_local(db, socket.gethostname(), pid_running)
        if not sql.exists(db, holder):
            raise LookupError(holder)
        return sql.try_admit(db, holder, resource, k, hostname=hostname, pid=pid)


def release(store: Store, holder: int) -> None:
    """Delete row ``holder`` (a place or a wait), in a transaction of its own."""
    with store.transaction() as db:
        sql.release(db, holder)


class Lease:
    """A recovery place held by this process, kept alive by a beacon thread until released."""

    def __init__(
        self,
        store: Store,
        holder: int,
        *,
        resource: str,
        place: int,
        k: int,
        waited: float,
        lease_seconds: float,
    ) -> None:
        self.store = store
        self.holder = holder
        self.resource = resource
        self.place = place
        self.k = k
        self.waited = waited
        self.lease_seconds = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"crashsafe-admission-{holder}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        interval = max(0.2, self.lease_seconds / 4)
        while not self._stop.wait(interval):
            try:
                with self.store.transaction() as db:
                    alive = sql.beacon(db, self.holder)
                if not alive:
                    log.warning(
                        "crashsafe: recovery place %s of %r was dropped as stale", self.holder, self.resource
                    )
            except Exception as exc:  # the store may blink; the lease survives a few missed beats
                log.warning("crashsafe: refreshing the recovery place failed (%s); retrying", exc)
                self.store.discard_connection()
        self.store.discard_connection()  # this thread's connection ends with it

    def release(self) -> None:
        """Give the place back (idempotent); the next waiter is admitted at its next poll."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            release(self.store, self.holder)
        except Exception as exc:  # the lease then dies with its beacon
            log.warning("crashsafe: releasing recovery place %s failed (%s)", self.holder, exc)
            self.store.discard_connection()
