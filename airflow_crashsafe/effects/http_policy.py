"""How a vendor's answer to an idempotent request is read, after the IETF Idempotency-Key draft.

2xx: done. 409: the original request is still being processed; wait and ask again with the same
key. 422: the key was reused with a different payload; a conflict, never retried. Other 4xx: refused
for good. 5xx, timeouts and connection errors: the request may or may not have taken effect; retry
with the same key, with capped exponential backoff and full jitter so that a crowd of reset retries
does not hit the vendor in step.

After an attempt whose outcome is unknown (always so for a host lost on a fleet), re-sending with
the same key is safe only if the target honours keys; a target that ignores them would act twice.
So nothing is assumed: the user declares it, else the retry stops (:func:`unknown_outcome_policy`).
"""

from __future__ import annotations

import random
from typing import Literal

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "DECLARE_HINT",
    "HONOURS_KEYS_EXTRA",
    "MAX_BACKOFF_SECONDS",
    "Answer",
    "UnknownOutcomePolicy",
    "backoff_seconds",
    "classify",
    "unknown_outcome_policy",
]

Answer = Literal["success", "in_progress", "conflict", "refused", "transient"]
UnknownOutcomePolicy = Literal["resend", "fail"]
MAX_BACKOFF_SECONDS = 30.0
#: The HTTP connection's extra that declares whether its target honours idempotency keys.
HONOURS_KEYS_EXTRA = "crashsafe_honours_idempotency_keys"
#: What the log and the errors say when nobody declared it.
DECLARE_HINT = (
    "If the target honours idempotency keys, declare it: target_honours_keys=True, or the HTTP "
    f'connection\'s extra {{"{HONOURS_KEYS_EXTRA}": true}}; if it does not, target_honours_keys=False.'
)


def classify(status: int) -> Answer:
    """What an HTTP status means for an idempotent call."""
    if 200 <= status < 300:
        return "success"
    if status == 409:
        return "in_progress"
    if status == 422:
        return "conflict"
    if 400 <= status < 500 and status not in (408, 425, 429):
        return "refused"
    return "transient"  # 5xx, 408/425/429 and anything unexpected: try again, same key


def backoff_seconds(
    attempt: int, *, base: float = 0.5, cap: float = MAX_BACKOFF_SECONDS, rng: random.Random | None = None
) -> float:
    """Full-jitter exponential backoff: uniform in [0, min(cap, base * 2**attempt)]."""
    ceiling = min(cap, base * (2 ** max(0, attempt)))
    return (rng or random).uniform(0, ceiling)


def unknown_outcome_policy(
    task_id: str, *, explicit: str | None, declared: bool | None, connection: object
) -> UnknownOutcomePolicy:
    """What a retry does after an unknown outcome: an explicit choice, else what was declared, else fail.

    ``declared`` is the operator's ``target_honours_keys``; ``connection`` the raw value of the
    connection's :data:`HONOURS_KEYS_EXTRA` (None when absent); the operator's argument wins.
    """
    if explicit not in (None, "resend", "fail"):
        raise ConfigurationError(
            f"{task_id}: on_unknown_outcome must be 'resend' or 'fail', got {explicit!r}."
        )
    if declared not in (None, True, False):
        raise ConfigurationError(f"{task_id}: target_honours_keys must be True or False, got {declared!r}.")
    source = "target_honours_keys=False"
    if declared is None:
        declared, source = (
            _connection_flag(task_id, connection),
            f"the connection's extra {HONOURS_KEYS_EXTRA}",
        )
    if explicit == "resend" and declared is False:
        raise ConfigurationError(
            f"{task_id}: on_unknown_outcome='resend' contradicts {source}: re-sending to a target "
            "that ignores idempotency keys can make it act twice. Drop one of the two."
        )
    if explicit is not None:
        return "fail" if explicit == "fail" else "resend"
    return "resend" if declared else "fail"


def _connection_flag(task_id: str, value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ConfigurationError(
        f"{task_id}: the HTTP connection's extra {HONOURS_KEYS_EXTRA} must be true or false, got {value!r}."
    )
