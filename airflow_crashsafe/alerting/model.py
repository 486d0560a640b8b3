"""The alert every sink receives: one plain, JSON-serialisable value.

An alert describes one incident at one moment: it opened (``trigger``), is still open
(``repeat``) or is over (``resolve``). ``dedup_key`` is the same for all three, so a sink that
understands incidents (PagerDuty) can tie them together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.errors import ConfigurationError

__all__ = ["EVENTS", "SEVERITIES", "Alert", "severity_rank"]

#: Lowest to highest.
SEVERITIES = ("info", "warning", "critical")
EVENTS = ("trigger", "repeat", "resolve")


def severity_rank(severity: str) -> int:
    """Order severities so a sink can take only alerts at or above its ``min_severity``."""
    return SEVERITIES.index(severity)


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat()


@dataclass(frozen=True)
class Alert:
    """One incident event, as delivered to every sink.

    :param dedup_key: stable for the whole incident (PagerDuty's ``dedup_key``).
    :param event: ``trigger``, ``repeat`` or ``resolve``.
    :param severity: ``critical`` pages; ``warning`` informs; ``info`` is for resolves and tests.
    :param began_at: when the incident began (best estimate: e.g. the last heartbeat seen).
    :param at: when this event was raised.
    :param details: what was true at that moment (dead jobs, running tasks, errors).
    """

    dedup_key: str
    event: str
    severity: str
    summary: str
    source: str
    began_at: datetime
    at: datetime
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.event not in EVENTS:
            raise ConfigurationError(
                f"alert event must be one of {EVENTS}, not {self.event!r}: use one of them"
            )
        if self.severity not in SEVERITIES:
            raise ConfigurationError(
                f"alert severity must be one of {SEVERITIES}, not {self.severity!r}: use one of them"
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON body of the generic webhook, and the outbox's stored form."""
        return {
            "dedup_key": self.dedup_key,
            "event": self.event,
            "severity": self.severity,
            "summary": self.summary,
            "source": self.source,
            "began_at": _iso(self.began_at),
            "at": _iso(self.at),
            "details": json.loads(json.dumps(dict(self.details), default=str)),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Alert:
        """Inverse of :meth:`to_dict` (details come back as plain JSON values)."""
        return cls(
            dedup_key=str(data["dedup_key"]),
            event=str(data["event"]),
            severity=str(data["severity"]),
            summary=str(data["summary"]),
            source=str(data["source"]),
            began_at=datetime.fromisoformat(str(data["began_at"])),
            at=datetime.fromisoformat(str(data["at"])),
            details=dict(data.get("details") or {}),
        )

    @property
    def title(self) -> str:
        """One line for a chat message or an email subject."""
        word = {"trigger": "ALERT", "repeat": "STILL FAILING", "resolve": "RESOLVED"}[self.event]
        return f"[{word}][{self.severity.upper()}] {self.summary} ({self.source})"

    def text(self) -> str:
        """A human-readable body: what, since when, and what was true at that moment."""
        lines = [self.title, f"began at: {_iso(self.began_at)}", f"this event at: {_iso(self.at)}"]
        for key, value in self.details.items():
            rendered = json.dumps(value, default=str) if not isinstance(value, str) else value
            lines.append(f"{key}: {rendered}")
        lines.append(f"incident: {self.dedup_key}")
        return "\n".join(lines)
