"""Operators whose writes take effect once per slot, however often Airflow runs the task."""

from __future__ import annotations

from airflow_crashsafe.operators.sql import (
    FencedSQLOperator,
    NaturalKeyMergeOperator,
    PartitionOverwriteOperator,
)

__all__ = ["FencedSQLOperator", "NaturalKeyMergeOperator", "PartitionOverwriteOperator"]
