"""Awaiting an older attempt's call that the ledger shows still in flight, to adopt its result.

After a scheduler reset the old worker keeps running for up to ~10 s (docs/design.md, "How Airflow
behaves on a crash"): its vendor call may be answered and recorded a moment after the new attempt
starts. Treating that call's outcome as unknown at once would re-send it (or, with
``on_unknown_outcome="fail"``, stop the task); waiting a bounded time for the holder to record
its outcome lets the new attempt adopt the result instead.

Whether the holder can still record anything is judged from what the ledger row says about it:
on this host, its pid must still run; on another host, its last sign of life (``intent_at``,
refreshed at every send) must be younger than the holder's lease.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from airflow_crashsafe.identity import Attempt
from airflow_crashsafe.store import ledger as ledger_sql
from airflow_crashsafe.store.ledger import LedgerEntry
from airflow_crashsafe.store.store import Store

__all__ = ["InFlightWait", "pid_running"]

_FIRST_POLL_SECONDS = 0.05
_MAX_POLL_SECONDS = 1.0


def pid_running(pid: int) -> bool:
    """True while a process with this pid exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    try:  # a killed but not yet reaped child still answers kill(0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


@dataclass
class InFlightWait:
    """One attempt's budget for awaiting an older holder of its key; ``waited`` once it has."""

    store: Store
    key: str
    attempt: Attempt
    budget: float  # seconds this attempt waits at most, in total
    lease: float  # seconds a holder on another host counts as alive after its last sign of life
    waited_seconds: float = 0.0
    awaited: LedgerEntry | None = None  # the holder this attempt waited for
    _deadline: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + max(0.0, self.budget)

    def should_wait(self, entry: LedgerEntry, age: float) -> bool:
        """True when ``entry`` is another attempt's intent whose outcome may still be recorded."""
        if entry.state != "intent" or time.monotonic() >= self._deadline:
            return False
        if self._is_me(entry):
            return False  # this very attempt left it (e.g. its outcome could not be recorded)
        return self._alive(entry, age)

    def wait(self, holder: LedgerEntry) -> None:
        """Poll the ledger until the holder's row moves on, the holder dies, or the budget ends."""
        self.awaited = holder
        began = time.monotonic()
        pause = _FIRST_POLL_SECONDS
        db = self.store.connection()
        try:
            while time.monotonic() < self._deadline:
                time.sleep(min(pause, max(0.0, self._deadline - time.monotonic())))
                pause = min(_MAX_POLL_SECONDS, pause * 1.5)
                with db.autocommit():
                    row = ledger_sql.in_flight(db, self.key)
                if row is None:
                    return
                entry, age = row
                same_holder = (entry.ti_id, entry.hostname, entry.pid) == (
                    holder.ti_id,
                    holder.hostname,
                    holder.pid,
                )
                if entry.state != "intent" or not same_holder or not self._alive(entry, age):
                    return
        finally:
            self.waited_seconds += time.monotonic() - began

    def _is_me(self, entry: LedgerEntry) -> bool:
        me = self.attempt
        return (entry.ti_id, entry.try_number, entry.hostname, entry.pid) == (
            me.ti_id,
            me.try_number,
            me.hostname,
            me.pid,
        )

    def _alive(self, entry: LedgerEntry, age: float) -> bool:
        if entry.hostname == self.attempt.hostname and entry.pid is not None:
            return pid_running(entry.pid)
        return age < self.lease
