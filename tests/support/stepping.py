"""Step one attempt through ``fenced_transaction`` by hand: begin, write, exit, in any interleaving."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing import FencedTransaction, fenced_transaction
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.store import Store
from tests.support.fencing import OUTPUT_TABLE, AttemptSpec, attempt_ctx, write_output

__all__ = ["SteppedAttempt"]


class SteppedAttempt:
    """One attempt on its own connection, advanced one stage at a time by the test.

    ``outcome`` ends as ``committed``, ``fenced_start``, ``fenced_commit``, ``already_committed`` or
    ``failed`` (the body raised); ``error`` keeps the FencedOut raised, if any.

    An attempt with a token that is a recovery re-run (try 2 or later, and the store has no record
    of the earlier tries) holds a place of ``recovery_resource``'s budget (``recovery_concurrency``)
    from ``begin`` to ``exit``; with every place held, ``begin`` waits ``[crashsafe]
    recovery_wait_seconds`` for one. Stepped on one thread nothing can free a place meanwhile, so a
    test that begins more such attempts than the budget must keep that wait short.
    """

    def __init__(
        self,
        db: Db,
        store: Store,
        spec: AttemptSpec,
        target: str = OUTPUT_TABLE,
        *,
        recovery_resource: str | None = None,
        recovery_concurrency: int | None = None,
    ) -> None:
        self.db = db
        self.store = store
        self.spec = spec
        self.target = target
        self.recovery_resource = recovery_resource
        self.recovery_concurrency = recovery_concurrency
        self.tx: FencedTransaction | None = None
        self.outcome: str | None = None
        self.error: FencedOut | None = None
        self._cm: AbstractContextManager[FencedTransaction] | None = None

    def begin(self) -> None:
        """Start work on the slot: take a token, or learn the slot is done or held by a newer try."""
        self._cm = fenced_transaction(
            "unused",
            self.target,
            context=attempt_ctx(self.spec),
            slot_partition=self.spec.partition,
            db=self.db,
            store=self.store,
            recovery_resource=self.recovery_resource,
            recovery_concurrency=self.recovery_concurrency,
        )
        try:
            self.tx = self._cm.__enter__()
        except FencedOut as exc:
            self.outcome, self.error, self._cm = "fenced_start", exc, None
            return
        if self.tx.already_committed:
            self.outcome = "already_committed"

    def write(self) -> None:
        """The body's writes (only for an attempt that holds a token)."""
        assert self.tx is not None
        assert self.outcome is None
        write_output(self.tx, self.tx.slot.partition, self.spec.name, self.spec.rows, self.spec.overwrite)

    def exit(self, *, fail: bool = False) -> None:
        """Leave the ``with`` block cleanly (commit if still newest) or by an exception (roll back)."""
        cm, self._cm = self._cm, None
        if cm is None:
            return
        if fail:
            boom = RuntimeError("the task died in its body")
            assert cm.__exit__(RuntimeError, boom, None) is False
            self.outcome = self.outcome or "failed"
            return
        try:
            cm.__exit__(None, None, None)
        except FencedOut as exc:
            self.outcome, self.error = "fenced_commit", exc
            return
        self.outcome = self.outcome or "committed"

    @property
    def token(self) -> int | None:
        return None if self.tx is None else self.tx.token

    def describe(self) -> dict[str, Any]:
        return {"name": self.spec.name, "outcome": self.outcome, "token": self.token}
