"""What a scan masked, and the type of the name test every scan is handed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MASK", "Found", "NameCheck"]

MASK = "***"
#: Tells whether a value under a name is a secret (the redaction policy's own test).
NameCheck = Callable[[str], bool]


@dataclass
class Found:
    """What a scan masked: credentials, and opaque path runs (maybe ids) kept apart."""

    credentials: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)

    def add(self, value: str, *, opaque: bool = False) -> None:
        value = value.strip()
        if value and MASK not in value:
            (self.opaque if opaque else self.credentials).add(value)

    def merge(self, other: Found) -> None:
        self.credentials |= other.credentials
        self.opaque |= other.opaque
