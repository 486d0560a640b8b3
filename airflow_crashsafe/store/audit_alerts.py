"""The ``crashsafe_audit_alerts`` table: the slots whose risky duplicate was already alerted.

Claimed in the transaction that spools the alert (:mod:`airflow_crashsafe.audit.alerts`), so a
slot is alerted once however many events or audit passes see it. See docs/design.md, "Audit".
"""

from __future__ import annotations

from airflow_crashsafe.store.dbapi import Db

__all__ = ["claim_alert"]


def claim_alert(
    db: Db, *, dag_id: str, task_id: str, map_index: int, slot_partition: str, risk: str, summary: str
) -> bool:
    """Record that a slot's risky duplicate is alerted; False when it already was (once per slot)."""
    cursor = db.execute(
        "INSERT INTO crashsafe_audit_alerts (dag_id, task_id, map_index, slot_partition, risk, summary) "
        "VALUES (%(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(risk)s, %(summary)s) "
        "ON CONFLICT (dag_id, task_id, map_index, slot_partition) DO NOTHING",
        {
            "dag_id": dag_id,
            "task_id": task_id,
            "map_index": map_index,
            "slot_partition": slot_partition,
            "risk": risk,
            "summary": summary,
        },
    )
    return int(cursor.rowcount) == 1
