"""The shared incident engine: grace, min_duration, judging, and one-off pages."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

from airflow_crashsafe.alerting.incidents import Condition, Incident, advance, page_once
from airflow_crashsafe.alerting.model import Alert

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def step(
    incidents: Mapping[str, Incident], active: Mapping[str, Condition], at: datetime, *, judged: bool = True
) -> tuple[dict[str, Incident], list[Alert]]:
    """One fold with no grace and no repeats; ``judged`` answers for every key."""
    return advance(
        incidents, active, at, grace=0.0, repeat_interval=0.0, instance="t", judged=lambda key: judged
    )


def test_min_duration_outlasts_a_shorter_grace() -> None:
    """A condition with min_duration pages only once it has lasted that long, whatever the grace."""
    slow = {"x": Condition("x", "critical", "x broken", T0, min_duration=60)}
    incidents, alerts = step({}, slow, T0)
    assert alerts == []
    incidents, alerts = step(incidents, slow, T0 + timedelta(seconds=59))
    assert alerts == []
    _, alerts = step(incidents, slow, T0 + timedelta(seconds=60))
    assert [(a.event, a.summary, a.details["first_seen"]) for a in alerts] == [
        ("trigger", "x broken", T0.isoformat())
    ]


def test_unjudged_incidents_are_kept_and_judged_ones_resolve() -> None:
    """An absent condition resolves only where the caller looked; elsewhere it is kept unchanged."""
    active = {"x": Condition("x", "warning", "x broken", T0)}
    incidents, _ = step({}, active, T0)
    later = T0 + timedelta(seconds=30)
    kept, alerts = step(incidents, {}, later, judged=False)
    assert (kept, alerts) == (incidents, [])
    gone, alerts = step(incidents, {}, later)
    assert gone == {}
    assert [(a.event, a.summary, a.details["lasted_seconds"]) for a in alerts] == [
        ("resolve", "recovered: x broken", 30)
    ]


def test_page_once_is_a_plain_trigger_under_the_callers_key() -> None:
    """A one-off page keeps the condition's details as they are and keys it <prefix>:<key>."""
    alert = page_once(
        Condition("d:t:-1:p", "critical", "ran twice", T0, {"a": 1}), T0, source="s", dedup_prefix="dup"
    )
    assert (alert.dedup_key, alert.event, alert.source, dict(alert.details)) == (
        "dup:d:t:-1:p",
        "trigger",
        "s",
        {"a": 1},
    )
