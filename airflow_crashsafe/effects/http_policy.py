"""How a vendor's answer to an idempotent request is read, after the IETF Idempotency-Key draft.

2xx: done. 409: the original request is still being processed; wait and ask again with the same
key. 422: the key was reused with a different payload; a conflict, never retried. Other 4xx: refused
for good. 5xx, timeouts and connection errors: the request may or may not have taken effect; retry
with the same key, with capped exponential backoff and full jitter so that a crowd of reset retries
does not hit the vendor in step.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["MAX_BACKOFF_SECONDS", "Answer", "backoff_seconds", "classify", "redact"]

Answer = Literal["success", "in_progress", "conflict", "refused", "transient"]
REDACTED = "***"
MAX_BACKOFF_SECONDS = 30.0


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


def redact(value: Any, fields: frozenset[str]) -> Any:
    """A copy of ``value`` with every mapping key named in ``fields`` (any case) masked."""
    if not fields:
        return value
    if isinstance(value, Mapping):
        return {k: REDACTED if str(k).lower() in fields else redact(v, fields) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, fields) for v in value]
    return value
