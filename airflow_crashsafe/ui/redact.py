"""Mask secret-looking values before anything from a task or a vendor is shown.

The ledger stores no secrets by design (docs/design.md, "Ledger"), but a vendor's response body or
an error text is the vendor's: a token echoed back would otherwise reach the browser. Keys that
name a secret are masked wherever they nest; long strings are cut.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MASK", "redact"]

MASK = "***"
MAX_TEXT = 2000
_SECRET_KEY = re.compile(
    r"pass(word|wd)?|secret|token|auth|api[-_]?key|credential|private|cookie|session|signature",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(bearer|basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def redact(value: Any, _depth: int = 0) -> Any:
    """A copy of ``value`` (JSON-like) with secret-named keys masked and strings cut to MAX_TEXT."""
    if _depth > 20:
        return MASK
    if isinstance(value, dict):
        return {str(k): _masked(str(k), v) or redact(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, _depth + 1) for v in value]
    if isinstance(value, str):
        text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", value)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
    return value


def _masked(key: str, value: Any) -> str | None:
    # Numbers are never secrets here: a fencing token (``newest_token``) is an ordinal, shown as is.
    if value is None or isinstance(value, bool | int | float) or not _SECRET_KEY.search(key):
        return None
    return MASK
