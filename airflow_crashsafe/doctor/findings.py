"""What a doctor check says: one finding per hazard looked for, with its fix and the exit code."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ERROR", "EXIT_CODES", "HAZARD", "OK", "SKIPPED", "Finding", "exit_code"]

OK = "ok"
HAZARD = "hazard"
SKIPPED = "skipped"  # does not apply to this deployment
ERROR = "error"  # could not be checked from here

#: The doctor's exit codes, as its ``--help`` lists them.
EXIT_CODES = {
    0: "no hazard found",
    1: "at least one hazard found (each is printed with its fix)",
    2: "usage or configuration error",
    3: "no hazard found, but at least one check could not be run from here",
}


@dataclass(frozen=True)
class Finding:
    """One check's verdict. ``fix`` is what to change, set whenever ``status`` is a hazard."""

    check: str
    status: str
    summary: str
    fix: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["details"] = dict(self.details)
        return out


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when any hazard was found, else 3 when any check could not run, else 0."""
    statuses = {finding.status for finding in findings}
    if HAZARD in statuses:
        return 1
    return 3 if ERROR in statuses else 0
