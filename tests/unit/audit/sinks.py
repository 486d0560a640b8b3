"""A store stand-in for the audit writer's tests: an :class:`~airflow_crashsafe.audit.writer.AuditSink`
that keeps what it was given, and can be made slow or unreachable."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from airflow_crashsafe.audit.events import AttemptEvent

__all__ = ["MemorySink"]


class MemorySink:
    """Keeps applied events and beacon batches; ``down`` makes every write fail, ``delay`` slows it."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.applied: list[AttemptEvent] = []
        self.beacons: list[AttemptEvent] = []
        self.down = False
        self.delay = delay  # seconds each write takes (a store under load)
        self.discarded = 0
        self.released = 0
        self.lock = threading.Lock()

    def apply(self, event: AttemptEvent) -> None:
        if self.down:
            raise ConnectionError("store down")
        time.sleep(self.delay)
        with self.lock:
            self.applied.append(event)

    def touch(self, beacons: Sequence[AttemptEvent]) -> int:
        if self.down:
            raise ConnectionError("store down")
        with self.lock:
            self.beacons += beacons
        return len(beacons)

    def discard_connection(self) -> None:
        self.discarded += 1

    def release(self) -> None:
        self.released += 1
