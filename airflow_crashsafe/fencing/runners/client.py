"""Run a write plan as a client-driven fenced transaction (SQLite).

The body runs in one transaction of this connection that ends with the fence check
(:func:`~airflow_crashsafe.fencing.transaction.open_write`); a killed client's transaction rolls
back, so there is nothing in flight for a re-run to adopt.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from airflow_crashsafe.fencing.decision import Run
from airflow_crashsafe.fencing.transaction import FencedTransaction, open_write
from airflow_crashsafe.sql.plans import WritePlan
from airflow_crashsafe.store.dbapi import Db

__all__ = ["ClientRunner"]

log = logging.getLogger(__name__)

P = TypeVar("P")


class ClientRunner:
    """The write as ``plan.transaction(tx, prepared)`` inside the fenced transaction."""

    in_flight_units = False
    unit_running = False

    def __init__(self, db: Db) -> None:
        self.db = db
        self.tx: FencedTransaction | None = None

    def run(self, run: Run, plan: WritePlan[P], prepared: P) -> dict[str, Any]:
        with open_write(self.db, run.slot, run.target, run.attempt, run.token) as tx:
            self.tx = tx
            result = plan.transaction(tx, prepared)
        return {**result, "token": run.token, "committed_by": run.attempt.describe(), "skipped": False}

    def on_kill(self, task_id: str, *, leave_unit: bool) -> None:
        if self.tx is not None:
            log.info("crashsafe: on_kill: cancelling the running statement of %s", task_id)
            self.tx.cancel()
        else:
            self.db.cancel()
