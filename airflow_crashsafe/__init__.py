"""airflow-crashsafe: make Airflow pipelines safe when the orchestrator crashes and tasks run twice.

Public surface: fenced writes (:func:`fenced_transaction` and the operators in
``airflow_crashsafe.operators``), :func:`recovery_admission` (a recovery budget for TaskFlow
re-runs), :func:`replay_safe` (a task declared safe to run twice, with the reason; the scan and the
cluster policy accept it), and the error hierarchy rooted at :class:`CrashsafeError`.
"""

from __future__ import annotations

from airflow_crashsafe.admission import recovery_admission
from airflow_crashsafe.audit import replay_safe
from airflow_crashsafe.errors import CrashsafeError, FencedOut, IdempotencyConflict
from airflow_crashsafe.fencing import fenced_transaction

__version__ = "0.1.0"

__all__ = [
    "CrashsafeError",
    "FencedOut",
    "IdempotencyConflict",
    "__version__",
    "fenced_transaction",
    "recovery_admission",
    "replay_safe",
]
