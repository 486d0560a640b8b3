"""Wait in the triggerer, not on a worker, for a predecessor's server-side unit to end.

A reset re-run that finds its slot's unit still in flight defers with this trigger: it holds no
worker slot while it waits (docs/design.md, "Server-side unit and adoption"). The trigger polls
the unit's advisory lock with ``pg_try_advisory_xact_lock`` (released again at once:
autocommit) until it is free, then fires ``{"status": "ended"}``; the resumed task reads from
the fence row whether the unit committed (adopt) or not (redo). Past ``deadline`` it fires
``{"status": "timeout"}`` and the task takes the slot over. With ``check_in_at`` it fires
``{"status": "check_in"}`` at that time if the unit still runs: the task looks again and defers
anew, so a triggerer that stops answering (stalled) is noticed by the deferral's timeout within
one check-in, not at the deadline (``fencing/triggerer.py``). Database errors are logged and
retried until the deadline: a brief outage of the warehouse must not fail the wait. Without a
triggerer, :meth:`UnitEndTrigger.wait_here` runs the same checks in the worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_crashsafe.store.dbapi import Db, connect_target

__all__ = ["UnitEndTrigger"]

_PROBE = "SELECT pg_try_advisory_xact_lock(%(k1)s, %(k2)s)"


class UnitEndTrigger(BaseTrigger):
    """Fires when the unit holding lock (k1, k2) in ``conn_id``'s database ends, or at ``deadline``.

    :param conn_id: Airflow connection of the database the unit writes to.
    :param lock: the unit's advisory lock key, ``[k1, k2]``.
    :param deadline: UNIX time after which the waiting attempt takes over.
    :param poll_interval: seconds between probes.
    :param check_in_at: UNIX time at which to fire ``check_in`` if the unit still runs (None: never).
    """

    def __init__(
        self,
        *,
        conn_id: str,
        lock: list[int],
        deadline: float,
        poll_interval: float = 2.0,
        check_in_at: float | None = None,
    ) -> None:
        super().__init__()
        self.conn_id = conn_id
        self.lock = [int(v) for v in lock]
        self.deadline = float(deadline)
        self.poll_interval = float(poll_interval)
        self.check_in_at = None if check_in_at is None else float(check_in_at)
        self._db: Db | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            {
                "conn_id": self.conn_id,
                "lock": self.lock,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "check_in_at": self.check_in_at,
            },
        )

    def probe(self) -> bool:
        """True when the lock is free (blocking; runs in a worker thread of the triggerer)."""
        if self._db is None or self._db.is_broken():
            self.close()
            self._db = connect_target(self.conn_id)
        free = self._db.execute_alone(_PROBE, {"k1": self.lock[0], "k2": self.lock[1]}).fetchone()[0]
        return bool(free)

    def check(self) -> dict[str, str] | None:
        """One probe (blocking): the event to fire, or None to keep waiting.

        A database error is logged and the connection dropped: the next check reconnects.
        """
        try:
            if self.probe():
                return {"status": "ended"}
        except Exception as exc:  # keep waiting through a warehouse blip
            self.log.warning("crashsafe: probing the in-flight unit failed (%s); retrying", exc)
            self.close()
        now = time.time()
        if now >= self.deadline:
            return {"status": "timeout"}
        if self.check_in_at is not None and now >= self.check_in_at:
            return {"status": "check_in"}
        return None

    def close(self) -> None:
        """Drop the probing connection (the next probe opens another)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def wait_here(self) -> dict[str, str]:
        """The same wait without a triggerer, blocking this process; the event it would fire."""
        try:
            while (event := self.check()) is None:
                time.sleep(max(0.0, min(self.poll_interval, self.deadline - time.time())))
            return event
        finally:
            self.close()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async

        check = sync_to_async(self.check)
        try:
            while (event := await check()) is None:
                await asyncio.sleep(self.poll_interval)
            yield TriggerEvent(event)
        finally:
            await sync_to_async(self.close)()
