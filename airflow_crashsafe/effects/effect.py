"""``effect()``: the ledger for any side effect in TaskFlow code (an email, an operational write).

::

    with effect("welcome-email", payload={"to": user}) as fx:
        if fx.pending:
            message_id = send_email(user, idempotency_key=fx.key)
            fx.done({"message_id": message_id})
    return fx.result

The block's work runs only while the effect is pending; a retry after ``done`` skips it and gives
back the recorded result. A block that raises leaves the outcome unknown, because it may have
acted before it failed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.admission.worker import recovery_admission
from airflow_crashsafe.effects.calls import Call, UnknownOutcomePolicy, begin_call, finish_call, record_send
from airflow_crashsafe.errors import CrashsafeError
from airflow_crashsafe.store.store import Store

__all__ = ["Effect", "effect"]


class Effect:
    """The handle a ``with effect(...)`` block works with."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self._done = call.action == "replay"
        self._result: Any = call.replayed_result if call.action == "replay" else None

    @property
    def key(self) -> str:
        """The idempotency key: hand it to the target if it accepts one."""
        return self._call.key

    @property
    def pending(self) -> bool:
        """True while the effect still has to happen in this attempt."""
        return not self._done

    @property
    def result(self) -> Any:
        """What ``done`` recorded, now or in the attempt that did the work."""
        return self._result

    @property
    def replayed(self) -> bool:
        return self._call.action == "replay"

    @property
    def adopted(self) -> bool:
        """True when the result was awaited from an older attempt that was still in the block."""
        return self._call.adopted_from is not None

    def done(self, result: Any = None) -> None:
        """Record that the effect happened, with a JSON-able result to give back to retries."""
        if self._done:
            raise CrashsafeError(
                f"Effect {self._call.target!r} (key {self.key}) is already done; check fx.pending."
            )
        finish_call(self._call, state="succeeded", result=result)
        self._done = True
        self._result = result


@contextmanager
def effect(
    target: str,
    *,
    context: Mapping[str, Any] | None = None,
    payload: Any = None,
    on_unknown_outcome: UnknownOutcomePolicy = "fail",
    version: int = 1,
    slot_partition: str | None = None,
    store: Store | None = None,
    in_flight_wait: float | None = None,
    recovery_resource: str | None = None,
    recovery_concurrency: int | None = None,
    deadline: Deadline | None = None,
) -> Iterator[Effect]:
    """Run a side effect at most once per slot and target (see the module docstring).

    An older attempt still inside the block (intent recorded, no ``done`` yet) is awaited up to
    ``in_flight_wait`` seconds (default ``[crashsafe] in_flight_wait_seconds``) and its result
    adopted; after that its outcome is unknown and ``on_unknown_outcome`` decides.

    A recovery re-run first waits in the worker for a place of ``recovery_resource`` (default:
    ``target``), before the ledger records anything (docs/design.md, "Recovery admission").
    """
    with recovery_admission(
        recovery_resource or target,
        context=context,
        concurrency=recovery_concurrency,
        deadline=deadline,
        store=store,
    ):
        yield from _effect_body(
            target, context, payload, on_unknown_outcome, version, slot_partition, store, in_flight_wait
        )


def _effect_body(
    target: str,
    context: Mapping[str, Any] | None,
    payload: Any,
    on_unknown_outcome: UnknownOutcomePolicy,
    version: int,
    slot_partition: str | None,
    store: Store | None,
    in_flight_wait: float | None,
) -> Iterator[Effect]:
    call = begin_call(
        target=target,
        request={"payload": payload},
        context=context,
        version=version,
        on_unknown_outcome=on_unknown_outcome,
        slot_partition=slot_partition,
        store=store,
        in_flight_wait=in_flight_wait,
    )
    handle = Effect(call)
    if call.action == "send":
        record_send(call)
    try:
        yield handle
    except BaseException as exc:
        if handle.pending:
            # Redacted (and cut) by finish_call: an exception text may quote a secret.
            finish_call(call, state="unknown", error=f"{type(exc).__name__}: {exc}")
        raise
    if handle.pending:
        # The block chose not to act (or forgot done()): nothing is known to have happened.
        finish_call(call, state="failed", error="block exited without calling done()")
