"""Sensors: gates that hold work back until Airflow is in a state where it can finish it."""

from __future__ import annotations

from airflow_crashsafe.sensors.heartbeat import SchedulerHeartbeatSensor

__all__ = ["SchedulerHeartbeatSensor"]
