"""Facts of the drill's later parts: vendor payments, the audit's view and the watchdog's alert.

Kept apart from :mod:`~airflow_crashsafe.drill.facts` so each part stays small; all are plain
dataclasses that round-trip through JSON with the rest of the drill's facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AlertFact", "AuditFact", "PaymentFact", "audit_from_json", "payments_from_json"]


@dataclass
class PaymentFact:
    """One intended payment (one push task) and what its vendor saw of it."""

    vendor: str
    payment: str
    task_id: str
    #: Requests that reached the vendor for this payment (repeats under one key included).
    received: int
    #: Payments the vendor booked for it: more than one is a double payment.
    booked: int
    #: Distinct idempotency keys those requests carried (0: none).
    keys: int
    intended: int = 1


@dataclass
class AuditFact:
    """The audit's verdict on one slot that executed more than once (``airflow-crashsafe duplicates``)."""

    task_id: str
    executions: int
    #: ``host pid`` of every execution, oldest first (empty strings where unknown).
    processes: list[str]
    overlap_seconds: float
    kinds: list[str]
    protection: str
    risk: str
    end_sources: list[str | None] = field(default_factory=list)

    @property
    def harmful(self) -> bool:
        """An unprotected re-run can double a side effect; a fenced or ledgered one cannot."""
        return self.protection == "unprotected"


@dataclass
class AlertFact:
    """What the watchdog delivered to the drill's webhook about the scheduler kill."""

    crashed_at: float | None
    restarted_at: float | None
    #: Every delivery (the alert's JSON plus ``received_at``, epoch seconds).
    #: Receipt time and summary of the first ``trigger`` and the ``resolve`` of ``scheduler_dead``.
    alert_at: float | None = None
    alert_summary: str | None = None
    resolve_at: float | None = None
    received: list[dict[str, Any]] = field(default_factory=list)
    settings: str = ""

    @property
    def false_alarms(self) -> int:
        """``scheduler_dead`` triggers delivered before the kill (a heartbeat late under load)."""
        if self.crashed_at is None:
            return 0
        return sum(
            r.get("event") == "trigger"
            and "scheduler_dead" in str(r.get("dedup_key"))
            and r["received_at"] < self.crashed_at
            for r in self.received
        )

    @property
    def open_at_kill(self) -> bool:
        """Whether a (false) scheduler-dead incident was still open when the scheduler was killed."""
        before = [
            r
            for r in self.received
            if "scheduler_dead" in str(r.get("dedup_key"))
            and self.crashed_at is not None
            and r["received_at"] < self.crashed_at
        ]
        return bool(before) and before[-1].get("event") != "resolve"

    @property
    def kill_to_alert(self) -> float | None:
        if self.alert_at is None or self.crashed_at is None:
            return None
        return self.alert_at - self.crashed_at

    @property
    def restart_to_resolve(self) -> float | None:
        if self.resolve_at is None or self.restarted_at is None:
            return None
        return self.resolve_at - self.restarted_at


def payments_from_json(raw: dict[str, Any]) -> dict[str, list[PaymentFact]]:
    return {side: [PaymentFact(**p) for p in facts] for side, facts in raw.items()}


def audit_from_json(raw: dict[str, Any]) -> dict[str, list[AuditFact]]:
    return {side: [AuditFact(**a) for a in facts] for side, facts in raw.items()}
