"""Everything one drill found, as plain dataclasses that round-trip through JSON (``--facts-json``).

Each capability module records its own part (:mod:`drill.capability`); the report is a pure
function of this record, so it is tested on recorded facts without booting anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from drill.alerting import AlertFact
from drill.audit import AuditFact, audit_from_json
from drill.dags import SIDE_TITLES
from drill.fleet_report import FleetFact
from drill.payments import PaymentFact, payments_from_json
from drill.wedge_report import WedgeFact
from drill.writes import DagFacts

__all__ = ["DrillFacts"]


@dataclass
class DrillFacts:
    """Everything the report needs; ``plain`` is the control, ``crashsafe`` is under test."""

    plain: DagFacts | None
    crashsafe: DagFacts | None
    crashed_at: float | None
    restarted_at: float | None
    wall_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: Session ids of every process group the drill started (tests check none survives).
    sessions: list[int] = field(default_factory=list)
    #: Side ("plain" / "crashsafe") -> its payments; side -> the audit's duplicate slots.
    payments: dict[str, list[PaymentFact]] = field(default_factory=dict)
    audit: dict[str, list[AuditFact]] = field(default_factory=dict)
    alert: AlertFact | None = None
    #: The work meter's server-side account (:meth:`drill.work.WorkReport.to_facts`).
    work: dict[str, Any] | None = None
    #: The wedge scenario's record (``--scenario wedge``; None for the default scenario).
    wedge: WedgeFact | None = None
    #: The Celery fleet scenario's fault and hosts (``--executor celery``; None otherwise).
    fleet: FleetFact | None = None
    #: The warehouse's engine (``--warehouse``): "postgres" or "mariadb".
    warehouse: str = "postgres"

    def dag(self, side: str) -> DagFacts | None:
        """The DAG run of ``side`` ("plain" / "crashsafe"), None if that side did not run."""
        return {"plain": self.plain, "crashsafe": self.crashsafe}[side]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> DrillFacts:
        raw = json.loads(text)
        for side in SIDE_TITLES:
            if raw.get(side) is not None:
                raw[side] = DagFacts.from_json(raw[side])
        raw["payments"] = payments_from_json(raw.get("payments") or {})
        raw["audit"] = audit_from_json(raw.get("audit") or {})
        if raw.get("alert") is not None:
            raw["alert"] = AlertFact(**raw["alert"])
        if raw.get("fleet") is not None:
            raw["fleet"] = FleetFact.from_json(raw["fleet"])
        if raw.get("wedge") is not None:
            raw["wedge"] = WedgeFact(**raw["wedge"])
        return cls(**raw)
