"""Capability: alerting. The watchdog beside Airflow pages on the SIGKILL and resolves on the restart.

The watchdog (:mod:`drill.watch`) runs as its own process next to the drill's Airflow and delivers
to a local webhook that stamps each alert with its receipt time, so SIGKILL-to-alert and
restart-to-resolve are measured end to end: the poll, the rule, the sink's HTTP POST (see
docs/design.md, "Watchdog and alerting"). A loaded scheduler's heartbeat may be late before the
kill; such early alerts are counted as false alarms, not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drill.facts import DrillFacts
    from drill.session import DrillSession
    from drill.watch import WebhookReceiver

__all__ = ["AlertFact", "alert_fact", "alert_lines", "collect", "held", "invariants", "rows", "section"]


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


def alert_fact(
    receiver: WebhookReceiver,
    *,
    crashed_at: float | None,
    restarted_at: float | None,
    settings: str,
    wait_seconds: float,
) -> AlertFact:
    """The scheduler kill as the webhook saw it: first ``scheduler_dead`` trigger and its resolve.

    The resolve may still be on its way when the runs end: wait up to ``wait_seconds`` for it.
    """
    since = crashed_at or 0.0
    alert = receiver.wait_for("trigger", "scheduler_dead", after=since, timeout=0)
    resolve = receiver.wait_for(
        "resolve", "scheduler_dead", after=since, timeout=wait_seconds if alert else 0
    )
    return AlertFact(
        crashed_at=crashed_at,
        restarted_at=restarted_at,
        alert_at=alert.at if alert else None,
        alert_summary=alert.summary() if alert else None,
        resolve_at=resolve.at if resolve else None,
        received=[{**d.alert, "received_at": d.at} for d in receiver.snapshot()],
        settings=settings,
    )


def collect(session: DrillSession, facts: DrillFacts) -> None:
    """The scheduler kill as the drill's webhook saw it (nothing when no watchdog ran).

    A fleet drill's faults are not all scheduler kills: :mod:`drill.fleet_watch` reports its watchdog.
    """
    if session.receiver is None or session.fleet is not None:
        return
    args, scenario = session.args, session.ran()
    facts.alert = alert_fact(
        session.receiver,
        crashed_at=scenario.crashed_at,
        restarted_at=scenario.restarted_at,
        settings=f"poll every {args.watch_interval:g} s, threshold {args.watch_threshold} s, default grace",
        wait_seconds=2 * args.watch_interval + 30,
    )


def alert_lines(alert: AlertFact | None) -> list[str]:
    """SIGKILL -> alert at the webhook, restart -> resolve, with the watchdog's settings."""
    if alert is None:
        return []
    lines = [f"Watchdog beside Airflow ({alert.settings}), alerts to a local webhook:"]
    if alert.kill_to_alert is None and alert.open_at_kill:
        lines.append("  SIGKILL -> alert: none new, a scheduler-dead incident was already open (see below)")
    elif alert.kill_to_alert is None:
        lines.append("  SIGKILL -> alert: NO ALERT received")
    else:
        lines.append(f"  SIGKILL -> alert delivered: {alert.kill_to_alert:.1f} s ({alert.alert_summary})")
    if alert.restart_to_resolve is None:
        lines.append("  restart -> resolve: no resolve received")
    else:
        lines.append(f"  restart -> resolve delivered: {alert.restart_to_resolve:.1f} s")
    if alert.false_alarms:
        lines.append(
            f"  {alert.false_alarms} scheduler-dead alert(s) before the kill: the loaded scheduler's "
            "heartbeat was later than the threshold (Airflow's own health said unhealthy too)"
        )
    return lines


def rows(facts: DrillFacts, side: str) -> dict[str, str]:
    return {}


def section(facts: DrillFacts) -> list[str]:
    return alert_lines(facts.alert)


def invariants(facts: DrillFacts) -> list[str]:
    return []


def held(facts: DrillFacts) -> list[str]:
    return []
