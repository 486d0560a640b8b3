"""The ledger protocol every external call follows (docs/design.md, "Ledger" and "Fencing token").

``begin_call`` takes a fencing token for the call's slot in the crashsafe store (a stale attempt is
refused before it sends) and, for a key never seen, records intent in the same statement. Any
other key is decided under the ledger row's lock, in the transaction that re-checks the token:
send (a resend the user allowed), replay a recorded success, refuse (conflicting payload, or an
unknown outcome the user does not want re-sent), or first await an older attempt whose call is
still in flight and adopt its result (:mod:`airflow_crashsafe.effects.in_flight`).
``record_send`` and ``finish_call`` keep the record true as the call proceeds.

Nothing reaches the ledger unredacted: the request, the result and the error text all pass through
the call's :class:`~airflow_crashsafe.redaction.RedactionPolicy`. The payload fingerprint is taken
over the redacted request, so two calls that differ only in a secret are the same call: a
credential is not the payload (a retry after a token was rotated is a retry, not a conflict), and a
stored hash of a secret could be guessed offline. Values the policy masks without knowing them for
credentials still count, through their digest: a raw text body, query parameters, and a path
segment masked only because it reads as random (``opaque_sha256``: such a run is too long to
guess, and it may be the id the call is about).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow_crashsafe import config, metrics
from airflow_crashsafe.effects.http_policy import UnknownOutcomePolicy
from airflow_crashsafe.effects.in_flight import InFlightWait
from airflow_crashsafe.effects.keys import derive_key
from airflow_crashsafe.errors import ConfigurationError, FencedOut, IdempotencyConflict, OutcomeUnknown
from airflow_crashsafe.identity import Attempt, Slot, attempt_from_context, current_context, slot_from_context
from airflow_crashsafe.redaction import DEFAULT_POLICY, RedactionPolicy, mask_in_task_log
from airflow_crashsafe.store import fences
from airflow_crashsafe.store import ledger as ledger_sql
from airflow_crashsafe.store.ledger import LedgerEntry
from airflow_crashsafe.store.store import Store, open_store

__all__ = [
    "Call",
    "UnknownOutcomePolicy",
    "begin_call",
    "fingerprint",
    "finish_call",
    "record_adoption",
    "record_send",
]

log = logging.getLogger(__name__)

_FENCE_PREFIX = "ledger:"  # keeps call fences apart from SQL write fences in a shared database


def fingerprint(request: Mapping[str, Any]) -> str:
    """A stable hash of the redacted request, to tell a retry from a new payload (see above)."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class _Subject:
    """Who calls what: the key, its slot and target, the attempt and its fencing token."""

    key: str
    slot: Slot
    target: str
    attempt: Attempt
    token: int | None
    store: Store


@dataclass
class Call(_Subject):
    """One external call of one attempt, as the ledger sees it."""

    action: Literal["send", "replay"]
    entry: LedgerEntry
    resend_of: LedgerEntry | None = None  # the earlier attempt whose outcome was unknown
    first_send_counted: bool = False  # the claim already counted the first send
    adopted_from: LedgerEntry | None = None  # set when the replayed success was awaited in flight
    redaction: RedactionPolicy = DEFAULT_POLICY  # applied to the result and error it records

    @property
    def replayed_result(self) -> Any:
        return self.entry.result


def _stale(slot: Slot, target: str, attempt: Attempt, holder: str) -> FencedOut:
    return FencedOut(
        f"Stale attempt {attempt.describe()} of {slot.describe()} was refused before calling "
        f"{target!r}: {holder} holds the slot. Nothing was sent; the newer attempt makes the call.",
        slot=slot,
    )


def begin_call(
    *,
    target: str,
    request: Mapping[str, Any],
    context: Mapping[str, Any] | None = None,
    version: int = 1,
    on_unknown_outcome: UnknownOutcomePolicy = "fail",
    slot_partition: str | None = None,
    store: Store | None = None,
    in_flight_wait: float | None = None,
    holder_lease: float | None = None,
    redaction: RedactionPolicy | None = None,
) -> Call:
    """Decide, durably and before anything is sent, what this attempt does about the call.

    ``in_flight_wait`` (default ``[crashsafe] in_flight_wait_seconds``) bounds how long an older
    attempt's call still in flight is awaited; ``holder_lease`` is how long such a holder on another
    host counts as alive after its last send (default: ``in_flight_wait``). ``redaction`` (default:
    the standard policy) masks the request before it is stored, and the result and error later; it
    also learns the request's secrets, to scrub them from any text.
    """
    if on_unknown_outcome not in ("resend", "fail"):
        raise ConfigurationError(
            f"on_unknown_outcome must be 'resend' or 'fail', got {on_unknown_outcome!r}."
        )
    ctx = current_context(context)
    slot = slot_from_context(ctx, slot_partition)
    attempt = attempt_from_context(ctx)
    key = derive_key(slot, target, version)
    store = store or open_store()
    policy = (redaction or DEFAULT_POLICY).knowing(request)
    # Airflow's masker then hides them in the task log too (an effect's own exception may quote them).
    mask_in_task_log(policy.log_masks())
    opaque = policy.opaque_digest(request)
    request = policy.value(request)
    if opaque is not None:  # masked only for reading as random: it may be the payload, so it counts
        request = {**request, "opaque_sha256": opaque}
    request_fingerprint = fingerprint(request)
    # The common case, a key never seen, in one round trip: token issued and intent recorded.
    issue, fresh = ledger_sql.claim_new(
        store.connection(),
        key=key,
        slot=slot,
        target=target,
        fence_target=_FENCE_PREFIX + target,
        version=version,
        fingerprint=request_fingerprint,
        request=dict(request),
        attempt=attempt,
    )
    if issue.newer is not None:
        raise _stale(slot, target, attempt, f"try {issue.newer.issued_try} (ti {issue.newer.issued_ti_id})")
    if fresh is not None:
        return Call(
            key,
            slot,
            target,
            attempt,
            issue.token,
            store,
            "send",
            fresh,
            first_send_counted=True,
            redaction=policy,
        )
    budget = config.in_flight_wait_seconds() if in_flight_wait is None else in_flight_wait
    waiter = InFlightWait(
        store, key, attempt, budget=budget, lease=budget if holder_lease is None else holder_lease
    )
    ask = _Ask(
        key, slot, target, attempt, issue.token, store, version, dict(request), request_fingerprint, policy
    )
    while True:
        decided = _decide_locked(ask, on_unknown_outcome, waiter)
        if isinstance(decided, Call):
            if waiter.awaited is not None:
                metrics.timing(
                    "crashsafe.ledger.in_flight_wait",
                    waiter.waited_seconds * 1000.0,
                    tags=metrics.slot_tags(slot),
                )
            return decided
        waiter.wait(decided)  # outside the transaction: the holder must be able to record


@dataclass
class _Ask(_Subject):
    """What one attempt asks of the ledger for one key."""

    version: int
    request: dict[str, Any]
    fingerprint: str
    redaction: RedactionPolicy


def _decide_locked(ask: _Ask, policy: UnknownOutcomePolicy, waiter: InFlightWait) -> Call | LedgerEntry:
    """Under the key's row lock: the Call to make, or the in-flight holder to await first."""
    key, slot, target, attempt = ask.key, ask.slot, ask.target, ask.attempt
    with ask.store.transaction() as db:
        if ask.token is not None and not ledger_sql.token_is_newest(
            db, slot, _FENCE_PREFIX + target, ask.token
        ):
            raise _stale(slot, target, attempt, "a newer attempt")
        found = ledger_sql.in_flight(db, key, lock=True)
        before = None if found is None else found[0]
        if found is not None and found[0].fingerprint == ask.fingerprint and waiter.should_wait(*found):
            return found[0]
        entry = ledger_sql.claim(
            db,
            before=before,
            key=key,
            slot=slot,
            target=target,
            version=ask.version,
            fingerprint=ask.fingerprint,
            request=ask.request,
            attempt=attempt,
            token=ask.token,
        )
        if entry.fingerprint != ask.fingerprint:
            raise IdempotencyConflict(
                f"Idempotency key {key} ({slot.describe()}, target {target!r}) was first used by "
                f"{entry.describe_attempt()} with a different payload. Nothing was sent. If the "
                "change is deliberate, bump version= to send it under a new key."
            )
        call = Call(key, slot, target, attempt, ask.token, ask.store, "send", entry, redaction=ask.redaction)
        if entry.state == "succeeded":
            ledger_sql.mark_replayed(db, key)
            call.action = "replay"
        else:
            call.resend_of = _unknown_outcome(before, policy, call, waiter)
    if call.action == "replay":
        _replayed(call, waiter)
    return call


def _unknown_outcome(
    before: LedgerEntry | None, policy: UnknownOutcomePolicy, call: Call, waiter: InFlightWait
) -> LedgerEntry | None:
    """The earlier attempt whose outcome is unknown (None if none); raises under the 'fail' policy."""
    key, target = call.key, call.target
    if before is not None and before.state == "conflict":
        raise IdempotencyConflict(
            f"The vendor rejected key {key} for {target!r} as reused with a different payload "
            f"(HTTP {before.response_status}). Nothing was sent. Bump version= to send under a new key."
        )
    if before is None or before.state not in ("intent", "unknown"):
        return None
    awaited = ""
    if waiter.awaited is not None:
        awaited = f" It was awaited for {waiter.waited_seconds:.1f} s without an answer being recorded."
    action = "refused" if policy == "fail" else "resent"
    metrics.incr("crashsafe.ledger.unknown_outcome_found", tags=metrics.slot_tags(call.slot, action=action))
    if policy == "fail":
        raise OutcomeUnknown(
            f"The outcome of {target!r} (key {key}) is unknown: {before.describe_attempt()} "
            f"recorded its intent at {before.intent_at} and sent it {before.send_count} "
            f"time(s) but never recorded an answer.{awaited} Nothing was sent now. Check with the "
            f"target whether it acted, then run `airflow-crashsafe ledger resolve {key} --succeeded` "
            "or `--failed` and retry the task; or use on_unknown_outcome='resend' for targets that "
            "honour idempotency keys."
        )
    log.warning(
        "crashsafe: re-sending %s with the same key %s; %s left its outcome unknown.%s",
        target,
        key,
        before.describe_attempt(),
        awaited,
    )
    return before


def _replayed(call: Call, waiter: InFlightWait) -> None:
    """Say that a recorded success is replayed; one adopted from an awaited attempt is an event."""
    entry = call.entry
    holder = waiter.awaited
    if holder is None or entry.ti_id != holder.ti_id:
        metrics.incr("crashsafe.ledger.replayed", tags=metrics.slot_tags(call.slot))
        log.info(
            "crashsafe: %s already succeeded (key %s, %s); replaying its result, not sending.",
            call.target,
            call.key,
            entry.describe_attempt(),
        )
        return
    call.adopted_from = entry
    log.info(
        "crashsafe: %s (key %s): adopted the work of %s, whose call was in flight; awaited it %.1f s "
        "and replayed its result, nothing was sent.",
        call.target,
        call.key,
        entry.describe_attempt(),
        waiter.waited_seconds,
    )
    record_adoption(
        call,
        adopted_try=entry.try_number,
        adopted_ti_id=entry.ti_id,
        adopted_hostname=entry.hostname,
        adopted_pid=entry.pid,
        waited_seconds=round(waiter.waited_seconds, 3),
    )


def record_adoption(call: Call, **detail: Any) -> None:
    """Count and record in the store that this attempt adopted an earlier attempt's call, not making it."""
    metrics.incr("crashsafe.ledger.adopted", tags=metrics.slot_tags(call.slot))
    call.store.record_event(
        "adopted",
        call.slot,
        _FENCE_PREFIX + call.target,
        call.attempt,
        token=call.token,
        detail={"key": call.key, **detail},
    )


def record_send(call: Call) -> None:
    """Count one request leaving for the target (before it leaves)."""
    if call.first_send_counted:
        call.first_send_counted = False  # the claim counted this one
        return
    db = call.store.connection()
    with db.autocommit():
        ledger_sql.mark_sending(db, call.key)


def finish_call(
    call: Call,
    *,
    state: Literal["succeeded", "failed", "conflict", "unknown"],
    response_status: int | None = None,
    result: Any = None,
    error: str | None = None,
) -> None:
    """Record what the call came to (redacted); a success also commits the slot's fence for this attempt."""
    if state == "unknown":
        metrics.incr("crashsafe.ledger.unknown_outcome", tags=metrics.slot_tags(call.slot))
    fence = None
    if state == "succeeded" and call.token is not None:
        fence = fences.commit_statement(call.slot, _FENCE_PREFIX + call.target, call.attempt, call.token)
    outcome = {
        "state": state,
        "response_status": response_status,
        "result": call.redaction.value(result),
        "error": None if error is None else call.redaction.text(error),
    }
    db = call.store.connection()
    if db.dialect.is_postgres:  # one statement: the outcome and the fence commit together
        ledger_sql.record_outcome_and_commit(db, call.key, fence=fence, **outcome)
        return
    with call.store.transaction() as tx:
        ledger_sql.record_outcome_and_commit(tx, call.key, fence=fence, **outcome)
