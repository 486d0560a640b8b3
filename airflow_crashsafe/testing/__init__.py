"""Test helpers users can build on: real local stand-ins for the systems crashsafe protects."""

from __future__ import annotations

from airflow_crashsafe.testing.context import fake_context
from airflow_crashsafe.testing.vendor import KeyHonouringVendor, NaiveVendor, Received

__all__ = ["KeyHonouringVendor", "NaiveVendor", "Received", "fake_context"]
