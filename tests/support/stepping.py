"""Step attempts by hand: one through ``fenced_transaction`` (begin, write, exit), or any code on a
thread of its own, held right after a function it calls returns, in any interleaving."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing import FencedTransaction, fenced_transaction
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.store import Store
from tests.support.fencing import OUTPUT_TABLE, AttemptSpec, attempt_ctx, write_output

__all__ = ["STEP_DEADLINE", "Held", "SteppedAttempt"]

#: The longest a stepped thread or the test waits for the other: every wait has a deadline.
STEP_DEADLINE = 30.0


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


class Held:
    """Threads, each running one attempt, held right after a wrapped function returns.

    ::

        held = Held()
        monkeypatch.setattr(module, "claim", held.after(module.claim))
        held.start("a", lambda: run_attempt(...))
        held.reached("a")  # a has claimed, and waits
        ...
        held.release("a")
        assert isinstance(held.finish("a"), FencedOut)

    Only the threads started here are held, each the first time it returns from the function.
    """

    def __init__(self) -> None:
        self._threads: dict[str, threading.Thread] = {}
        self._reached: dict[str, threading.Event] = {}
        self._go: dict[str, threading.Event] = {}
        self.returned: dict[str, Any] = {}  # what the wrapped function returned to each thread
        self.outcome: dict[str, Any] = {}  # each attempt's result, or the exception it raised

    def after(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func``, holding a thread started here once it returns, until :meth:`release`."""

        def holding(*args: Any, **kwargs: Any) -> Any:
            result = func(*args, **kwargs)
            name = threading.current_thread().name
            if name in self._reached and not self._reached[name].is_set():
                self.returned[name] = result
                self._reached[name].set()
                if not self._go[name].wait(STEP_DEADLINE):
                    raise TimeoutError(f"attempt {name} was never released")
            return result

        return holding

    def start(self, name: str, work: Callable[[], Any]) -> None:
        """Run ``work`` as attempt ``name`` on a thread of its own."""

        def run() -> None:
            try:
                self.outcome[name] = work()
            except Exception as exc:  # the test inspects it
                self.outcome[name] = exc
            finally:
                self._reached[name].set()  # an attempt that ends without being held is not waited for

        self._reached[name], self._go[name] = threading.Event(), threading.Event()
        self._threads[name] = threading.Thread(target=run, name=name, daemon=True)
        self._threads[name].start()

    def reached(self, name: str) -> Any:
        """Wait until ``name`` is held (or ended); what the wrapped function returned to it."""
        assert self._reached[name].wait(STEP_DEADLINE), f"attempt {name} never reached its hold"
        assert name not in self.outcome, f"attempt {name} ended before its hold: {self.outcome[name]!r}"
        return self.returned[name]

    def release(self, name: str) -> None:
        self._go[name].set()

    def finish(self, name: str) -> Any:
        """Release ``name`` and wait for it to end; its result or the exception it raised."""
        self.release(name)
        self._threads[name].join(STEP_DEADLINE)
        assert not self._threads[name].is_alive(), f"attempt {name} did not end"
        return self.outcome[name]
