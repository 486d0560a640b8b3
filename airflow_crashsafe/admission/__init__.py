"""Recovery admission: re-runs that must redo work take a place of a per-resource budget first.

After a scheduler restart, a heartbeat timeout or a lost worker, every interrupted task re-runs at
once; a budget per resource (by default the target connection) lets ``k`` of them work at a time
and admits the rest by deadline, then by how much depends on them. First tries never wait. The
operators wait deferred; TaskFlow code uses :func:`recovery_admission`. See docs/design.md,
"Recovery admission".
"""

from __future__ import annotations

from airflow_crashsafe.admission.lease import Lease
from airflow_crashsafe.admission.worker import recovery_admission

__all__ = ["Lease", "recovery_admission"]
