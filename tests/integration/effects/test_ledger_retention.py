"""Ledger retention on both stores: pruning entries also prunes their calls' fence rows, no more."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.effects import effect
from airflow_crashsafe.store import ledger
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import fake_context

pytestmark = pytest.mark.integration


def _call(task_id: str) -> None:
    with effect("send", context=fake_context(dag_id="retention", task_id=task_id)) as fx:
        if fx.pending:
            fx.done({"sent": task_id})


def _age(store: Store, task_id: str, days: int) -> None:
    """Move a call's intent and its slot's last token ``days`` into the past."""
    with store.transaction() as db:
        if db.dialect.is_postgres:
            ago = "CURRENT_TIMESTAMP - make_interval(days => %(days)s)"
            db.execute(
                f"UPDATE crashsafe_ledger SET intent_at = {ago} WHERE task_id = %(t)s",
                {"days": days, "t": task_id},
            )
            db.execute(
                f"UPDATE crashsafe_fences SET issued_at = {ago} WHERE task_id = %(t)s",
                {"days": days, "t": task_id},
            )
        else:
            stamp = datetime.now(timezone.utc) - timedelta(days=days)
            db.execute(
                "UPDATE crashsafe_ledger SET intent_at = %(at)s WHERE task_id = %(t)s",
                {"at": stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", "t": task_id},
            )
            db.execute(
                "UPDATE crashsafe_fences SET issued_at = %(at)s WHERE task_id = %(t)s",
                {"at": stamp.strftime("%Y-%m-%d %H:%M:%S"), "t": task_id},
            )


def _fenced(store: Store) -> set[str]:
    with store.transaction() as db:
        return {str(r[0]) for r in db.execute("SELECT task_id FROM crashsafe_fences").fetchall()}


def test_pruning_removes_old_calls_and_their_fences_only(store: Store) -> None:
    for task_id in ("recent", "old", "old_fence_recent_entry"):
        _call(task_id)
    _age(store, "old", 45)
    _age(store, "old_fence_recent_entry", 45)
    with store.transaction() as db:  # its entry is recent again: the fence row must stay
        db.execute(
            "UPDATE crashsafe_ledger SET intent_at = CURRENT_TIMESTAMP WHERE task_id = %(t)s",
            {"t": "old_fence_recent_entry"},
        )
    cutoff = datetime.now(timezone.utc) - timedelta(days=30)
    with store.transaction() as db:
        assert ledger.prune(db, older_than=cutoff) == 1
        assert ledger.prune_fences(db, older_than=cutoff) == 1
    assert _fenced(store) == {"recent", "old_fence_recent_entry"}
    # The pruned call is gone for good: a late retry of it sends again, under the same key.
    _call("old")
    assert _fenced(store) == {"recent", "old_fence_recent_entry", "old"}


def test_pruning_fences_before_any_call_is_a_no_op(store: Store) -> None:
    with store.transaction() as db:
        assert ledger.prune_fences(db, older_than=datetime.now(timezone.utc)) == 0
