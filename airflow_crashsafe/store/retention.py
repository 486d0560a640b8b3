"""Retention: delete what crashsafe recorded long ago and no live slot needs any more.

``airflow-crashsafe db prune`` calls these with a cutoff ``[crashsafe] audit_retention_days``
(or ``--older-than``) days back. In the store: events (``crashsafe_events``) created before the
cutoff; attempt records (``crashsafe_attempts``) last updated before it, with the duplicate
digest's rows (``crashsafe_duplicates``) last active before it and alerts
(``crashsafe_audit_alerts``) sent before it. The idempotency ledger keeps its own rule
(``airflow-crashsafe ledger prune``, ``ledger_retention_days``).

In a target database (docs/design.md, "Fencing token" and "Committed means done"):

* a unit (``crashsafe_units``) is deleted once it finished (committed or failed) before the
  cutoff; a running unit never is;
* a fence row (``crashsafe_fences``) is deleted only when its slot had no token issued and no
  commit since the cutoff and no unit of that slot is still running. The row is what tells a retry
  of the same clear generation that the slot is committed, and a stale attempt that it is stale:
  without it such a retry would run the write again. So the window must be longer than any task
  instance can still be retried without a clear, or a stale attempt still run (days, not hours;
  at least one day is enforced). A cleared run starts a new clear generation and needs no old row.

Fence rows of ledger calls (target ``ledger:...``, in the store) are left to ``ledger prune``.
Every function counts instead of deleting when ``dry_run``.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.fences import FENCE_TABLE, fence_table_exists
from airflow_crashsafe.store.units import UNIT_TABLE
from airflow_crashsafe.store.values import to_db

__all__ = ["prune_store", "prune_target"]

#: (table, the condition that makes a row old) in the store; ``%(cutoff)s`` is the cutoff.
_STORE_RULES = (
    ("crashsafe_events", "created_at < %(cutoff)s"),
    ("crashsafe_attempts", "updated_at < %(cutoff)s"),
    ("crashsafe_duplicates", "last_active_at < %(cutoff)s"),
    ("crashsafe_audit_alerts", "alerted_at < %(cutoff)s"),
)

_OLD_FENCE = (
    "issued_at < %(cutoff)s AND (committed_at IS NULL OR committed_at < %(cutoff)s)"
    " AND target NOT LIKE 'ledger:%%'"
)
_NO_RUNNING_UNIT = (
    f" AND NOT EXISTS (SELECT 1 FROM {UNIT_TABLE} u WHERE u.state = 'running'"
    f" AND u.dag_id = {FENCE_TABLE}.dag_id AND u.task_id = {FENCE_TABLE}.task_id"
    f" AND u.map_index = {FENCE_TABLE}.map_index AND u.slot_partition = {FENCE_TABLE}.slot_partition"
    f" AND u.target = {FENCE_TABLE}.target)"
)


def _apply(db: Db, table: str, where: str, params: dict[str, Any], dry_run: bool) -> int:
    if dry_run:
        return int(db.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()[0])
    return int(db.execute(f"DELETE FROM {table} WHERE {where}", params).rowcount)


def prune_store(db: Db, *, older_than: datetime, dry_run: bool = False) -> dict[str, int]:
    """Delete (or count) the store's old events and audit records; rows per table."""
    params = {"cutoff": to_db(db, older_than)}
    return {table: _apply(db, table, where, params, dry_run) for table, where in _STORE_RULES}


def _unit_table_exists(db: Db) -> bool:
    if not db.dialect.is_postgres:
        return False  # units exist on PostgreSQL only
    return bool(db.execute(f"SELECT to_regclass('{UNIT_TABLE}') IS NOT NULL").fetchone()[0])


def prune_target(db: Db, *, older_than: datetime, dry_run: bool = False) -> dict[str, int]:
    """Delete (or count) a target database's finished units and idle fence rows; rows per table."""
    found: dict[str, int] = {}
    units = _unit_table_exists(db)
    if units:
        params = {"cutoff": older_than}
        where = "state <> 'running' AND finished_at < %(cutoff)s"
        found[UNIT_TABLE] = _apply(db, UNIT_TABLE, where, params, dry_run)
    if fence_table_exists(db):
        # The fence row's times are CURRENT_TIMESTAMP: on SQLite "YYYY-MM-DD HH:MM:SS" text in UTC.
        cutoff: Any = older_than
        if not db.dialect.is_postgres:
            cutoff = older_than.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        where = _OLD_FENCE + (_NO_RUNNING_UNIT if units else "")
        found[FENCE_TABLE] = _apply(db, FENCE_TABLE, where, {"cutoff": cutoff}, dry_run)
    return found
