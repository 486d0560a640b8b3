"""The ledger protocol every external call follows (ARCHITECTURE decisions 4 and 7).

``begin_call`` takes a fencing token for the call's slot in the crashsafe store (a stale attempt is
refused before it sends), then, under the ledger row's lock and in the transaction that re-checks
the token, decides: send (first time, or a resend the user allowed), replay a recorded success, or
refuse (conflicting payload, or an unknown outcome the user does not want re-sent).
``record_send`` and ``finish_call`` keep the record true as the call proceeds.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow_crashsafe.effects.keys import derive_key
from airflow_crashsafe.errors import ConfigurationError, FencedOut, IdempotencyConflict, OutcomeUnknown
from airflow_crashsafe.identity import Attempt, Slot, attempt_from_context, current_context, slot_from_context
from airflow_crashsafe.store import fences
from airflow_crashsafe.store import ledger as ledger_sql
from airflow_crashsafe.store.ledger import LedgerEntry
from airflow_crashsafe.store.store import Store, open_store

__all__ = ["Call", "UnknownOutcomePolicy", "begin_call", "fingerprint", "finish_call", "record_send"]

log = logging.getLogger(__name__)

UnknownOutcomePolicy = Literal["resend", "fail"]
_FENCE_PREFIX = "ledger:"  # keeps call fences apart from SQL write fences in a shared database


def fingerprint(request: Mapping[str, Any]) -> str:
    """A stable hash of what is sent (secrets already removed), to tell a retry from a new payload."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass
class Call:
    """One external call of one attempt, as the ledger sees it."""

    key: str
    slot: Slot
    target: str
    attempt: Attempt
    token: int | None
    store: Store
    action: Literal["send", "replay"]
    entry: LedgerEntry
    resend_of: LedgerEntry | None = None  # the earlier attempt whose outcome was unknown
    first_send_counted: bool = False  # the claim already counted the first send

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
) -> Call:
    """Decide, durably and before anything is sent, what this attempt does about the call."""
    if on_unknown_outcome not in ("resend", "fail"):
        raise ConfigurationError(
            f"on_unknown_outcome must be 'resend' or 'fail', got {on_unknown_outcome!r}."
        )
    ctx = current_context(context)
    slot = slot_from_context(ctx, slot_partition)
    attempt = attempt_from_context(ctx)
    key = derive_key(slot, target, version)
    store = store or open_store()
    fence_target = _FENCE_PREFIX + target

    issue = fences.issue_token(store.connection(), slot, fence_target, attempt)
    if issue.newer is not None:
        raise _stale(slot, target, attempt, f"try {issue.newer.issued_try} (ti {issue.newer.issued_ti_id})")

    request_fingerprint = fingerprint(request)
    if issue.token is not None:
        # The common case, a key never seen, in one round trip; anything else takes the locked path.
        db = store.connection()
        with db.autocommit():
            fresh = ledger_sql.claim_new(
                db,
                key=key,
                slot=slot,
                target=target,
                fence_target=fence_target,
                version=version,
                fingerprint=request_fingerprint,
                request=dict(request),
                attempt=attempt,
                token=issue.token,
            )
        if fresh is not None:
            return Call(
                key, slot, target, attempt, issue.token, store, "send", fresh, first_send_counted=True
            )

    with store.transaction() as db:
        if issue.token is not None and not ledger_sql.token_is_newest(db, slot, fence_target, issue.token):
            raise _stale(slot, target, attempt, "a newer attempt")
        before, entry = ledger_sql.claim(
            db,
            key=key,
            slot=slot,
            target=target,
            version=version,
            fingerprint=request_fingerprint,
            request=dict(request),
            attempt=attempt,
            token=issue.token,
        )
        if entry.fingerprint != request_fingerprint:
            raise IdempotencyConflict(
                f"Idempotency key {key} ({slot.describe()}, target {target!r}) was first used by "
                f"{entry.describe_attempt()} with a different payload. Nothing was sent. If the "
                "change is deliberate, bump version= to send it under a new key."
            )
        if entry.state == "succeeded":
            ledger_sql.mark_replayed(db, key)
            log.info(
                "crashsafe: %s already succeeded (key %s, %s); replaying its result, not sending.",
                target,
                key,
                entry.describe_attempt(),
            )
            return Call(key, slot, target, attempt, issue.token, store, "replay", entry)
        if before is not None and before.state == "conflict":
            raise IdempotencyConflict(
                f"The vendor rejected key {key} for {target!r} as reused with a different payload "
                f"(HTTP {before.response_status}). Nothing was sent. Bump version= to send under a new key."
            )
        resend_of = before if before is not None and before.state in ("intent", "unknown") else None
        if resend_of is not None and on_unknown_outcome == "fail":
            raise OutcomeUnknown(
                f"The outcome of {target!r} (key {key}) is unknown: {resend_of.describe_attempt()} "
                f"recorded its intent at {resend_of.intent_at} and sent it {resend_of.send_count} "
                "time(s) but never recorded an answer. Nothing was sent now. Check with the target "
                f"whether it acted, then run `airflow-crashsafe ledger resolve {key} --succeeded` or "
                "`--failed` and retry the task; or use on_unknown_outcome='resend' for targets that "
                "honour idempotency keys."
            )
        if resend_of is not None:
            log.warning(
                "crashsafe: re-sending %s with the same key %s; %s left its outcome unknown.",
                target,
                key,
                resend_of.describe_attempt(),
            )
        return Call(key, slot, target, attempt, issue.token, store, "send", entry, resend_of)


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
    """Record what the call came to; a success also commits the slot's fence for this attempt."""
    fence = None
    if state == "succeeded" and call.token is not None:
        fence = fences.commit_statement(call.slot, _FENCE_PREFIX + call.target, call.attempt, call.token)
    outcome = {"state": state, "response_status": response_status, "result": result, "error": error}
    db = call.store.connection()
    if db.dialect.is_postgres:  # one statement: the outcome and the fence commit together
        with db.autocommit():
            ledger_sql.record_outcome_and_commit(db, call.key, fence=fence, **outcome)
        return
    with call.store.transaction() as tx:
        ledger_sql.record_outcome_and_commit(tx, call.key, fence=fence, **outcome)
