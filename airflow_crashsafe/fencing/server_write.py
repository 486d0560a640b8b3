"""Run an attempt's fenced write as a server-side unit (PostgreSQL) and read back what it did.

The attempt already holds a fencing token. This records the unit (autocommitted, so a newer
attempt can see whose work is in flight), sends the ``DO`` block built by
:mod:`.server_unit` in autocommit, and turns its coded errors back into crashsafe's exceptions.
Once the block is running, the database alone decides whether it commits: a killed sender does
not stop it, and a newer token issued meanwhile makes it roll back at its fence check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing.server_unit import UnitFailure, UnitProgram, render_sql, unit_failure
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences, units
from airflow_crashsafe.store.dbapi import Db

__all__ = ["ServerWrite", "UnitDataError", "run_server_write"]

log = logging.getLogger(__name__)

_START_CHECK = (
    f"SELECT count(*) FROM {fences.FENCE_TABLE} WHERE {fences.SLOT_MATCH} AND issued_token = %(token)s"
)
_FINISH = (
    f"UPDATE {units.UNIT_TABLE} SET state = 'committed', result = $1::jsonb, finished_at = clock_timestamp() "
    "WHERE unit_id = %(unit_id)s"
)


class UnitDataError(Exception):
    """A data check inside the unit failed (nothing was written); the operator words the error."""

    def __init__(self, failure: UnitFailure) -> None:
        super().__init__(failure.code)
        self.failure = failure


@dataclass
class ServerWrite:
    """A unit while it runs: ``unit_id`` once recorded, so ``on_kill`` can say which it leaves."""

    db: Db
    slot: Slot
    target: str
    attempt: Attempt
    token: int
    unit_id: str | None = None
    running: bool = False

    def cancel(self) -> None:
        self.db.cancel()


def run_server_write(
    write: ServerWrite,
    build: Callable[[UnitProgram, Db], None],
    fenced_out: Callable[[str], FencedOut],
) -> dict[str, Any]:
    """Build the unit with ``build(program, db)``, run it, return its result counters.

    :param fenced_out: makes the error for a stale unit, given the stage ("start"/"commit").
    :raises UnitDataError: a data check failed; the caller turns it into its own error.
    """
    db, slot, target, attempt, token = write.db, write.slot, write.target, write.attempt, write.token
    program = UnitProgram(token=token, try_number=attempt.try_number)
    with db.autocommit():  # what build() reads must not leave a transaction open
        build(program, db)
    write.unit_id = unit_id = units.record_start(db, slot, target, attempt, token)
    slot_params = fences.slot_params(slot, target)
    commit_sql, commit_params = fences.commit_statement(slot, target, attempt, token)
    block = program.render(
        lock_sql=units.lock_key(slot, target).sql(),
        start_check_sql=render_sql(db, _START_CHECK, {**slot_params, "token": token}),
        commit_sql=render_sql(db, commit_sql, commit_params),
        finish_sql=render_sql(db, _FINISH, {"unit_id": unit_id}),
    )
    try:
        with db.autocommit():
            # The caller's probe set client_connection_check_interval = 0 on this connection.
            write.running = True
            try:
                db.raw.cursor().execute(block)  # no parameters: the block is final text
            finally:
                write.running = False
    except Exception as exc:
        failure = unit_failure(exc)
        _mark_failed(db, unit_id, failure.code if failure else f"{type(exc).__name__}: {exc}")
        if failure is None:
            if _superseded(db, slot, target, token):
                # A newer attempt cancelled this stale unit as it took the slot over.
                raise fenced_out("run (cancelled by the newer attempt)") from exc
            raise
        if failure.code in ("CSSTL", "CSFEN"):
            raise fenced_out("start" if failure.code == "CSSTL" else "commit") from None
        raise UnitDataError(failure) from None
    except BaseException:
        # Interrupted in Python (a task timeout, a signal): the block may still be running.
        write.cancel()
        _mark_failed(db, unit_id, "interrupted")
        raise
    unit = units.unit_by_id(db, unit_id)
    return dict(unit.result) if unit is not None else {}


def _superseded(db: Db, slot: Slot, target: str, token: int) -> bool:
    """After an error: does a newer token hold the slot now? (False when it cannot be read.)"""
    try:
        if db.is_broken():
            return False
        with db.autocommit():
            state = fences.read_fence(db, slot, target)
        return state is not None and state.issued_token != token
    except Exception:
        return False


def _mark_failed(db: Db, unit_id: str, error: str) -> None:
    try:
        if not db.is_broken():
            units.mark_failed(db, unit_id, error)
    except Exception:
        log.debug("crashsafe: could not mark unit %s failed", unit_id, exc_info=True)
