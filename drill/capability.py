"""What each part of the drill contributes to its report, through one small interface.

The drill proves several capabilities at once — warehouse writes (:mod:`drill.writes`), payments
(:mod:`drill.payments`), the audit (:mod:`drill.audit`), the work meter (:mod:`drill.work`) and
alerting (:mod:`drill.alerting`). Each is a module with the functions of :class:`Capability` (mypy
checks each module against it): it reads its facts back after the runs, gives rows to the
side-by-side table and lines below it, judges its own invariants and says what held.
:mod:`drill.report` assembles them in :data:`drill.report.CAPABILITIES` order; a new capability is
a new module in that tuple (and, for its facts, a field of :class:`drill.facts.DrillFacts`).

``collect`` boots nothing but may take a while; the others are pure functions of recorded facts
(``--facts-json``), so the report is tested without Airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession

__all__ = ["Capability"]


class Capability(Protocol):
    """One capability under drill; "side" is "plain" (the control) or "crashsafe" (under test)."""

    def collect(self, session: DrillSession, facts: DrillFacts) -> None:
        """Read what happened after the runs and record it in this capability's field of ``facts``."""

    def rows(self, facts: DrillFacts, side: str) -> dict[str, str]:
        """Rows of ``side``'s column in the side-by-side table, in display order."""

    def section(self, facts: DrillFacts) -> list[str]:
        """Lines below the table (``[]``: none)."""

    def invariants(self, facts: DrillFacts) -> list[str]:
        """Crashsafe's promises here that did not hold (``[]``: all held)."""

    def held(self, facts: DrillFacts) -> list[str]:
        """Lines of the verdict saying what held, when no invariant broke (``[]``: nothing to say)."""
