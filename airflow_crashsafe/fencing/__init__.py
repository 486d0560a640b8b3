"""Attempt fencing: a stale attempt can never overwrite a newer attempt's output."""

from __future__ import annotations

from airflow_crashsafe.fencing.transaction import FencedTransaction, fenced_transaction

__all__ = ["FencedTransaction", "fenced_transaction"]
