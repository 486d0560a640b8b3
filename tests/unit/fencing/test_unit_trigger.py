"""The trigger a re-run defers to while a predecessor's unit is in flight."""

from __future__ import annotations

from airflow_crashsafe.triggers.unit import UnitEndTrigger


def test_the_trigger_serializes_to_what_rebuilds_it() -> None:
    """The triggerer rebuilds the trigger from its serialized kwargs: they must round-trip."""
    trigger = UnitEndTrigger(conn_id="warehouse", lock=[1, -2], deadline=123.5, poll_interval=1.0)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_crashsafe.triggers.unit.UnitEndTrigger"
    again = UnitEndTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
