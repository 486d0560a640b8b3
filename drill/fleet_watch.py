"""Capability: the watchdog on a fleet. One scheduler of two dead is a warning, both a page.

The fleet drill starts the watchdog (``airflow-crashsafe watch`` reading the metadata DB's job
table, as an operator runs it beside an HA deployment: docs/fleet.md, "Watching a fleet") once the
fleet is up, delivering to the drill's local webhook. Each scenario records every alert the
webhook received after its fault (:class:`Watched`); the report shows the verdict in the table,
the same for both sides since the watchdog watches Airflow, not a DAG. Promised: in (a)
``one-scheduler`` a ``scheduler_replica_dead`` *warning* and no ``scheduler_dead`` page; in (b)
``schedulers-down`` the ``scheduler_dead`` page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession
    from drill.watch import Delivery, WebhookReceiver

__all__ = [
    "PAGE",
    "WARNING",
    "Watched",
    "collect",
    "held",
    "invariants",
    "rows",
    "section",
    "verdict_wait",
    "wait_verdict",
]

#: The condition each scheduler scenario must raise: (scenario -> (event key prefix, severity)).
WARNING = ("scheduler_replica_dead", "warning")
PAGE = ("scheduler_dead", "critical")
EXPECTED = {"one-scheduler": WARNING, "schedulers-down": PAGE}


@dataclass
class Watched:
    """What the watchdog said after one scenario's fault."""

    settings: str
    fault_at: float | None
    #: Each alert triggered after the fault: key, severity, summary, seconds after the fault.
    alerts: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Watched:
        return cls(**raw)

    def triggered(self, key_prefix: str, severity: str | None = None) -> list[dict[str, Any]]:
        return [
            a
            for a in self.alerts
            if a["event"] == "trigger"
            and (a["key"] == key_prefix or a["key"].startswith(f"{key_prefix}:"))
            and (severity is None or a["severity"] == severity)
        ]


def verdict_wait(threshold: float, interval: float) -> float:
    """How long after a kill the watchdog's verdict may take: the threshold, two polls, slack."""
    return threshold + 2 * interval + 30


def wait_verdict(
    receiver: WebhookReceiver, scenario: str, *, after: float, timeout: float
) -> Delivery | None:
    """The trigger ``scenario`` must raise (warning or page), waited for up to ``timeout`` s."""
    key, _severity = EXPECTED[scenario]
    return receiver.wait_for("trigger", key, after=after, timeout=timeout)


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """Alerts the webhook received since the running fleet scenario's fault (none without watchdog)."""
    fleet, receiver = facts.fleet, session.receiver
    if fleet is None or receiver is None or fleet.fault_at is None:
        return
    args = session.args
    watched = Watched(
        settings=f"reads the metadata DB's job table, polls every {args.watch_interval:g} s, "
        f"threshold {args.watch_threshold} s",
        fault_at=fleet.fault_at,
    )
    for d in receiver.snapshot():
        if d.at < fleet.fault_at:
            continue
        watched.alerts.append(
            {
                "event": d.alert.get("event"),
                "key": d.key,
                "severity": d.alert.get("severity"),
                "summary": d.alert.get("summary"),
                "after_s": round(d.at - fleet.fault_at, 1),
            }
        )
    fleet.watched = watched


def _watched(facts: DrillFacts) -> Watched | None:
    return facts.fleet.watched if facts.fleet is not None else None


def _verdict(watched: Watched) -> str:
    pages = watched.triggered(PAGE[0], PAGE[1])
    warnings = watched.triggered(WARNING[0], WARNING[1])
    parts = []
    if pages:
        parts.append(f"PAGE scheduler dead +{pages[0]['after_s']:.0f} s")
    if warnings:
        parts.append(f"warning one replica down +{warnings[0]['after_s']:.0f} s")
    if not pages:
        parts.append("no page")
    return ", ".join(parts)


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    watched = _watched(facts)
    if watched is None:
        return {}
    return {"watchdog (whole fleet)": _verdict(watched)}


def section(facts: DrillFacts) -> list[str]:
    watched = _watched(facts)
    if watched is None:
        return []
    lines = [f"Watchdog beside the fleet ({watched.settings}); alerts after the fault:"]
    for a in watched.alerts:
        lines.append(f"  +{a['after_s']:.1f} s {a['event']} {a['severity']}: {a['summary']}")
    if not watched.alerts:
        lines.append("  none")
    return lines


def invariants(facts: DrillFacts) -> list[str]:
    watched = _watched(facts)
    fleet = facts.fleet
    if watched is None or fleet is None or fleet.scenario not in EXPECTED:
        return []
    broken = []
    if fleet.scenario == "one-scheduler":
        if not watched.triggered(*WARNING):
            broken.append("the watchdog did not warn that one scheduler replica of two was down")
        if watched.triggered(*PAGE):
            broken.append("the watchdog paged 'scheduler dead' while one scheduler of two still ran")
    elif not watched.triggered(*PAGE):
        broken.append("the watchdog did not page while both schedulers were down")
    return broken


def held(facts: DrillFacts) -> list[str]:
    watched = _watched(facts)
    fleet = facts.fleet
    if watched is None or fleet is None or fleet.scenario not in EXPECTED:
        return []
    if fleet.scenario == "one-scheduler":
        return ["the watchdog warned 'one replica down' and did not page,"]
    return ["the watchdog paged 'scheduler dead' while both were down,"]
