"""crashsafe's own tables and the SQL that reads and writes them (and nothing else does).

Every statement against a ``crashsafe_*`` table lives in one of these modules; the rest of the
package calls their functions (docs/design.md, "Store"):

- :mod:`~airflow_crashsafe.store.store`: :class:`Store`, its connections and transactions, and
  ``crashsafe_events`` (what fenced writes did); :mod:`~airflow_crashsafe.store.schema`: the
  versioned DDL of the store's tables and its migration.
- :mod:`~airflow_crashsafe.store.fences` and :mod:`~airflow_crashsafe.store.units`: fencing
  tokens and server-side units, in the target database.
- :mod:`~airflow_crashsafe.store.ledger` (with :mod:`~airflow_crashsafe.store.prepared`): the
  idempotency ledger.
- The audit's tables: :mod:`~airflow_crashsafe.store.attempts` (each execution of a slot, and
  :class:`~airflow_crashsafe.store.attempts.AttemptLog`, the audit writer's store side),
  :mod:`~airflow_crashsafe.store.dirty` (task instances the digest must reclassify),
  :mod:`~airflow_crashsafe.store.duplicates` (the duplicate digest),
  :mod:`~airflow_crashsafe.store.evidence` (fence events and ledger keys as protection evidence),
  :mod:`~airflow_crashsafe.store.audit_alerts` (slots already alerted), and
  :mod:`~airflow_crashsafe.store.values` (how their times and booleans are stored).
- :mod:`~airflow_crashsafe.store.scans`: each task's latest verdict from ``airflow-crashsafe scan
  --record``, for the UI's risk map.
"""

from __future__ import annotations

from airflow_crashsafe.store.store import Store, open_store, reset_store_cache

__all__ = ["Store", "open_store", "reset_store_cache"]
