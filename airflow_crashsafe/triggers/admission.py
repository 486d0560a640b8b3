"""Wait in the triggerer, not on a worker, for a recovery place (docs/design.md, "Recovery admission").

A recovery re-run whose resource's budget is full leaves its waiting row in the store and defers
with this trigger. Each poll (spaced with growing, jittered pauses so that waiters do not poll in
step) drops this host's dead holders and runs the admission statement for the row, which also
refreshes the row's beacon. Admitted, it fires ``{"status": "admitted", "place": i}`` and the
resumed task claims the place; past ``give_up_at`` it fires ``{"status": "timeout"}`` (the task goes
ahead over the budget); a row that vanished fires ``{"status": "lost"}`` (the task asks again).
Store errors are logged and retried: a blip of the store must not fail the wait.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_crashsafe.admission.lease import MAX_POLL_SECONDS, jittered, poll
from airflow_crashsafe.store.store import Store, open_store

__all__ = ["RecoveryAdmissionTrigger"]


class RecoveryAdmissionTrigger(BaseTrigger):
    """Fires when waiting row ``holder`` is admitted to one of ``k`` places of ``resource``.

    :param holder: id of the re-run's waiting row in the store.
    :param resource: what the budget limits (by default the target connection id).
    :param k: the budget.
    :param give_up_at: UNIX time after which the re-run goes ahead without a place.
    :param store_url: the store's URL; None: the configured store (``[crashsafe] conn_id``).
    :param max_poll: the longest pause between polls, in seconds.
    """

    def __init__(
        self,
        *,
        holder: int,
        resource: str,
        k: int,
        give_up_at: float,
        store_url: str | None = None,
        max_poll: float = MAX_POLL_SECONDS,
    ) -> None:
        super().__init__()
        self.holder = int(holder)
        self.resource = str(resource)
        self.k = int(k)
        self.give_up_at = float(give_up_at)
        self.store_url = store_url
        self.max_poll = float(max_poll)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__name__}",
            {
                "holder": self.holder,
                "resource": self.resource,
                "k": self.k,
                "give_up_at": self.give_up_at,
                "store_url": self.store_url,
                "max_poll": self.max_poll,
            },
        )

    def _store(self) -> Store:
        return open_store(self.store_url)

    def probe(self) -> dict[str, Any] | None:
        """One admission attempt (blocking; runs in a worker thread of the triggerer): the event, or None."""
        try:
            # pid 0: the place waits for the resumed task, which claims it; only its beacon keeps it.
            place = poll(
                self._store(), self.holder, self.resource, self.k, hostname=socket.gethostname(), pid=0
            )
        except LookupError:
            return {"status": "lost", "holder": self.holder}
        if place is None:
            return None
        return {"status": "admitted", "holder": self.holder, "place": place}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async

        probe = sync_to_async(self.probe)
        n = 0
        try:
            while True:
                try:
                    event = await probe()
                except Exception as exc:  # keep waiting through a store blip
                    self.log.warning("crashsafe: polling for a recovery place failed (%s); retrying", exc)
                    await sync_to_async(self._store().discard_connection)()
                    event = None
                if event is not None:
                    yield TriggerEvent(event)
                    return
                if time.time() >= self.give_up_at:
                    yield TriggerEvent({"status": "timeout", "holder": self.holder})
                    return
                await asyncio.sleep(jittered(n, cap=self.max_poll))
                n += 1
        finally:
            await sync_to_async(self._store().discard_connection)()
