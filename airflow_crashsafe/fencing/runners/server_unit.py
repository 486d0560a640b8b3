"""Run a write plan as a server-side unit (PostgreSQL) and read back what it did.

The attempt already holds a fencing token. This records the unit (autocommitted, so a newer
attempt can see whose work is in flight), sends the ``DO`` block the plan built into a
:class:`~airflow_crashsafe.sql.unit_program.UnitProgram` in autocommit, and turns its coded
errors back into crashsafe's exceptions. Once the block is running, the database alone decides
whether it commits: a killed sender does not stop it, and a newer token issued meanwhile makes
it roll back at its fence check (docs/design.md, "Server-side unit and adoption").
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from airflow_crashsafe.fencing.decision import Run
from airflow_crashsafe.fencing.events import fenced_out_error, record_commit
from airflow_crashsafe.sql.plans import WritePlan
from airflow_crashsafe.sql.unit_program import UnitProgram, render_sql, unit_failure
from airflow_crashsafe.store import fences, units
from airflow_crashsafe.store.dbapi import Db

__all__ = ["ServerUnitRunner"]

log = logging.getLogger(__name__)

P = TypeVar("P")


class ServerUnitRunner:
    """The write as one unit built by ``plan.unit(program, db, prepared)``.

    ``unit_id`` is set once the unit is recorded, so ``on_kill`` can say which unit it leaves.
    """

    in_flight_units = True

    def __init__(self, db: Db) -> None:
        self.db = db
        self.unit_id: str | None = None
        self.started = False
        self.unit_running = False

    def run(self, run: Run, plan: WritePlan[P], prepared: P) -> dict[str, Any]:
        """Build the unit, run it, record the commit; its result counters and the fence's values.

        :raises FencedOut: a newer attempt's token stopped the unit (at its start, at its commit,
            or by cancelling it as it took the slot over).
        """
        db, slot, target, attempt, token = self.db, run.slot, run.target, run.attempt, run.token
        self.started = True
        program = UnitProgram(token=token, try_number=attempt.try_number)
        with db.autocommit():  # what the plan reads must not leave a transaction open
            plan.unit(program, db, prepared)
        self.unit_id = unit_id = units.record_start(db, slot, target, attempt, token)
        block = program.render(
            lock_sql=units.lock_key(slot, target).sql(),
            start_check_sql=render_sql(db, *fences.holds_statement(slot, target, token)),
            commit_sql=render_sql(db, *fences.commit_statement(slot, target, attempt, token)),
            finish_sql=render_sql(db, *units.finish_statement(unit_id)),
        )

        def fenced_out(stage: str) -> Exception:
            return fenced_out_error(db, None, slot, target, attempt, token, None, stage)

        try:
            with db.autocommit():
                # decide()'s probe set client_connection_check_interval = 0 on this connection.
                self.unit_running = True
                try:
                    db.raw.cursor().execute(block)  # no parameters: the block is final text
                finally:
                    self.unit_running = False
        except Exception as exc:
            failure = unit_failure(exc)
            self._mark_failed(failure.code if failure else f"{type(exc).__name__}: {exc}")
            if failure is None:
                if self._superseded(run):
                    # A newer attempt cancelled this stale unit as it took the slot over.
                    raise fenced_out("run (cancelled by the newer attempt)") from exc
                raise
            if failure.code in ("CSSTL", "CSFEN"):
                raise fenced_out("start" if failure.code == "CSSTL" else "commit") from None
            raise plan.data_error(failure) from None
        except BaseException:
            # Interrupted in Python (a task timeout, a signal): the block may still be running.
            db.cancel()
            self._mark_failed("interrupted")
            raise
        unit = units.unit_by_id(db, unit_id)
        result = dict(unit.result) if unit is not None else {}
        record_commit(slot, target, attempt, token, {"unit_id": unit_id})
        return {**result, "token": token, "committed_by": attempt.describe(), "skipped": False}

    def on_kill(self, task_id: str, *, leave_unit: bool) -> None:
        if self.unit_running and leave_unit:
            log.info(
                "crashsafe: on_kill: leaving unit %s of %s running server-side; it commits if this "
                "attempt still holds the newest token, and a re-run adopts it (on_kill_unit='cancel' "
                "cancels it instead).",
                self.unit_id,
                task_id,
            )
            return
        if self.started:
            log.info("crashsafe: on_kill: cancelling unit %s of %s", self.unit_id, task_id)
        self.db.cancel()

    def _superseded(self, run: Run) -> bool:
        """After an error: does a newer token hold the slot now? (False when it cannot be read.)"""
        try:
            if self.db.is_broken():
                return False
            with self.db.autocommit():
                state = fences.read_fence(self.db, run.slot, run.target)
            return state is not None and state.issued_token != run.token
        except Exception:
            return False

    def _mark_failed(self, error: str) -> None:
        try:
            if self.unit_id is not None and not self.db.is_broken():
                units.mark_failed(self.db, self.unit_id, error)
        except Exception:
            log.debug("crashsafe: could not mark unit %s failed", self.unit_id, exc_info=True)
