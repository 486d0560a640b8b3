"""Idempotency keys and the intent-before-send ledger for every external call."""

from __future__ import annotations

from airflow_crashsafe.effects.effect import Effect, effect
from airflow_crashsafe.effects.keys import derive_key, idempotency_key
from airflow_crashsafe.effects.resumable import CrashsafeResumableJobMixin

__all__ = ["CrashsafeResumableJobMixin", "Effect", "derive_key", "effect", "idempotency_key"]
