"""Mask secret-looking values before anything from a task or a vendor is shown.

The ledger stores nothing secret (:mod:`airflow_crashsafe.redaction`, docs/design.md, "Ledger"),
but rows written before that policy, a vendor's response body and an error text are not ours to
trust: the UI applies the same policy again to whatever it shows. Keys that name a secret are
masked wherever they nest, credentials in text are masked, long strings are cut.
"""

from __future__ import annotations

from typing import Any

from airflow_crashsafe.redaction import DEFAULT_POLICY, MASK, MAX_TEXT

__all__ = ["MASK", "MAX_TEXT", "redact"]


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like) with secret-named keys masked and strings scrubbed and cut."""
    return DEFAULT_POLICY.value(value)
