"""The drill's alerting capability on recorded facts: latencies from the kill and the restart."""

from __future__ import annotations

from drill.alerting import AlertFact, alert_lines
from drill.facts import DrillFacts

T0 = 1_796_006_753.0


def test_alert_lines_and_false_alarms_round_trip() -> None:
    """Latencies are measured from the kill and the restart; earlier triggers count as false alarms."""
    received = [
        {"received_at": T0 - 10, "event": "trigger", "dedup_key": "airflow-crashsafe:h:scheduler_dead:a"},
        {"received_at": T0 - 5, "event": "resolve", "dedup_key": "airflow-crashsafe:h:scheduler_dead:a"},
    ]
    alert = AlertFact(
        T0, T0 + 40, alert_at=T0 + 33.0, alert_summary="s", resolve_at=T0 + 52.5, received=received
    )
    facts = DrillFacts(None, None, T0, T0 + 40, alert=alert)
    again = DrillFacts.from_json(facts.to_json()).alert
    assert again is not None
    assert again.kill_to_alert == 33.0
    assert again.restart_to_resolve == 12.5
    assert again.false_alarms == 1
    assert not again.open_at_kill
    text = "\n".join(alert_lines(again))
    assert "SIGKILL -> alert delivered: 33.0 s" in text
    assert "1 scheduler-dead alert(s) before the kill" in text
