"""Whether this run is CI's: there, what a developer's machine may lack is a failure, not a skip."""

from __future__ import annotations

import os

__all__ = ["in_ci"]


def in_ci() -> bool:
    """``CI`` set to 1, true or yes, as CI services and .ci/run set it."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
