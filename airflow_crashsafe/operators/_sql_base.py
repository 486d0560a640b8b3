"""The plumbing every fenced SQL operator shares: lazy connection, the fence, on_kill, the result.

A private module: the operators are public in :mod:`airflow_crashsafe.operators.sql`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from airflow.sdk import BaseOperator

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.fencing import fenced_transaction
from airflow_crashsafe.fencing.server_unit import UnitProgram
from airflow_crashsafe.fencing.server_write import ServerWrite, run_server_write
from airflow_crashsafe.fencing.transaction import fenced_out_error, record_commit, record_event, record_skip
from airflow_crashsafe.identity import Attempt, Slot, attempt_from_context, current_context, slot_from_context
from airflow_crashsafe.sql import checks
from airflow_crashsafe.sql.introspect import TableInfo, describe_table
from airflow_crashsafe.sql.quoting import TableName
from airflow_crashsafe.store import fences, units
from airflow_crashsafe.store.dbapi import Db, connect_target
from airflow_crashsafe.store.fences import CommittedBy
from airflow_crashsafe.store.units import Unit
from airflow_crashsafe.triggers.unit import UnitEndTrigger

if TYPE_CHECKING:
    from airflow_crashsafe.fencing import FencedTransaction

log = logging.getLogger(__name__)

__all__ = ["ON_KILL_CHOICES", "FencedSQLBase", "Params", "source_columns"]

Params = Mapping[str, Any] | Sequence[Any] | None
ON_KILL_CHOICES = ("leave", "cancel")


class FencedSQLBase(BaseOperator):
    """Shared plumbing: lazy connection, the fence, adoption, ``on_kill`` and the result.

    On PostgreSQL the write runs as one server-side unit (:mod:`airflow_crashsafe.fencing.server_write`)
    that commits even if this process is killed, and a reset re-run that finds its predecessor's
    unit still in flight defers to the triggerer and adopts that unit's commit instead of redoing
    the work (ARCHITECTURE decision 12). On SQLite the write is a client-driven fenced transaction.

    :param adopt_in_flight: wait for and adopt a predecessor's in-flight unit (PostgreSQL).
    :param adoption_timeout: how long to wait for it before cancelling it and taking over.
    :param on_kill_unit: ``"leave"`` (a SIGTERMed attempt's unit keeps running, to be adopted) or
        ``"cancel"`` (cancel it, as a client-driven transaction would be).
    """

    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "sql": "sql",
        "parameters": "json",
        "partition": "json",
    }
    ui_color = "#e8f0fe"
    # Set only while execute() runs, so that on_kill() (another thread or a signal) can cancel.
    _crashsafe_tx: FencedTransaction | None = None
    _crashsafe_unit: ServerWrite | None = None
    _crashsafe_db: Db | None = None
    # Set by resume_after_unit() for the execute() it re-enters.
    _crashsafe_resume: dict[str, Any] | None = None

    def __init__(
        self,
        *,
        conn_id: str,
        slot_partition: str | None = None,
        adopt_in_flight: bool | None = None,
        adoption_timeout: timedelta | float | None = None,
        on_kill_unit: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_kill_unit is not None and on_kill_unit not in ON_KILL_CHOICES:
            raise ConfigurationError(
                f"on_kill_unit={on_kill_unit!r} of {kwargs.get('task_id')!r}: "
                f"choose one of {ON_KILL_CHOICES}."
            )
        self.conn_id = conn_id
        self.slot_partition = slot_partition
        # None: the [crashsafe] option, read where the task runs (not where the DAG is parsed).
        self.adopt_in_flight = adopt_in_flight
        self.adoption_timeout = adoption_timeout
        self.on_kill_unit = on_kill_unit

    def _adopts(self) -> bool:
        return config.adopt_in_flight() if self.adopt_in_flight is None else bool(self.adopt_in_flight)

    def _adoption_timeout_seconds(self) -> float:
        timeout = self.adoption_timeout
        if timeout is None:
            return config.adoption_timeout_seconds()
        return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)

    def _leaves_unit_on_kill(self) -> bool:
        policy = config.on_kill_unit() if self.on_kill_unit is None else self.on_kill_unit
        return policy == "leave"

    def on_kill(self) -> None:
        """Leave a running server-side unit to finish (default) or cancel what is running."""
        unit, tx, db = self._crashsafe_unit, self._crashsafe_tx, self._crashsafe_db
        if unit is not None and unit.running and self._leaves_unit_on_kill():
            log.info(
                "crashsafe: on_kill: leaving unit %s of %s running server-side; it commits if this "
                "attempt still holds the newest token, and a re-run adopts it (on_kill_unit='cancel' "
                "cancels it instead).",
                unit.unit_id,
                self.task_id,
            )
            return
        if unit is not None:
            log.info("crashsafe: on_kill: cancelling unit %s of %s", unit.unit_id, self.task_id)
            unit.cancel()
        elif tx is not None:
            log.info("crashsafe: on_kill: cancelling the running statement of %s", self.task_id)
            tx.cancel()
        elif db is not None:
            db.cancel()

    def resume_after_unit(
        self, context: Any, awaited: dict[str, Any], deadline: float, event: dict[str, Any] | None = None
    ) -> Any:
        """Back from the triggerer: the awaited unit ended (adopt or redo) or the wait timed out."""
        self._crashsafe_resume = {"awaited": awaited, "deadline": deadline, **(event or {})}
        try:
            return self.execute(context)
        finally:
            self._crashsafe_resume = None

    def _run_fenced(
        self,
        context: Mapping[str, Any],
        target: str,
        prepare: Callable[[Db], Any],
        body: Callable[[FencedTransaction, Any], dict[str, Any]],
        unit: Callable[[UnitProgram, Db, Any], None] | None = None,
    ) -> dict[str, Any]:
        """``prepare(db)`` (read-only checks, before any token), then the write inside the fence.

        ``unit`` builds the server-side unit (PostgreSQL); ``body`` writes through a client-driven
        fenced transaction (SQLite, or an operator without a unit).
        """
        db = connect_target(self.conn_id)
        self._crashsafe_db = db
        try:
            prepared = prepare(db)
            db.rollback()  # end the read-only catalog transaction before the fence starts its own
            if unit is not None and db.dialect.is_postgres:
                return self._run_unit(context, db, target, lambda p, d: unit(p, d, prepared))
            with fenced_transaction(
                self.conn_id, target, context=context, slot_partition=self.slot_partition, db=db
            ) as tx:
                self._crashsafe_tx = tx
                if tx.committed_by is not None:  # tx.already_committed
                    return self._skipped(tx.slot, target, tx.committed_by.describe())
                result = body(tx, prepared)
            return {**result, "token": tx.token, "committed_by": tx.attempt.describe(), "skipped": False}
        finally:
            self._crashsafe_tx = None
            self._crashsafe_unit = None
            self._crashsafe_db = None
            db.close()

    def _skipped(self, slot: Slot, target: str, by: str) -> dict[str, Any]:
        log.info(
            "crashsafe: %s (target %s) was already committed by %s in this clear generation; "
            "not running the load again.",
            slot.describe(),
            target,
            by,
        )
        return {"rows": None, "token": None, "committed_by": by, "skipped": True}

    def _run_unit(
        self, context: Mapping[str, Any], db: Db, target: str, build: Callable[[UnitProgram, Db], None]
    ) -> dict[str, Any]:
        """PostgreSQL: wait for and adopt an in-flight predecessor, or run our own unit."""
        ctx = current_context(context)
        slot, attempt = slot_from_context(ctx, self.slot_partition), attempt_from_context(ctx)
        resume = self._crashsafe_resume or {}
        timed_out = resume.get("status") == "timeout"
        seen = units.probe(db, slot, target, keep_running=db.driver_server_version() >= 140000)
        if self._adopts() and not timed_out and seen.unit is not None:
            self._defer_to(slot, target, seen.unit, resume.get("deadline"))
        issue = fences.issue_token(db, slot, target, attempt)
        if issue.already_committed is not None:
            awaited = resume.get("awaited")
            if awaited and int(awaited["token"]) == issue.already_committed.token:
                return self._adopted(db, slot, target, attempt, awaited, issue.already_committed)
            record_skip(slot, target, attempt, issue.already_committed)
            return self._skipped(slot, target, issue.already_committed.describe())
        if issue.token is None:
            raise fenced_out_error(db, None, slot, target, attempt, None, issue.newer, "start")
        token = issue.token
        # Whatever unit of this slot still runs is stale now: stop it rather than queue behind it.
        # (One that started between the probe and our token fails its start check at once.)
        cancelled = units.cancel_holder(db, slot, target) if not seen.free or timed_out else []
        if cancelled or timed_out:
            log.warning(
                "crashsafe: %s: took the slot over from %s (cancelled backend(s) %s)",
                slot.describe(),
                (resume.get("awaited") or {}).get("ti_id", "a stale unit"),
                cancelled or "none still running",
            )
            record_event(
                "took_over",
                slot,
                target,
                attempt,
                token,
                {"cancelled_backends": cancelled, "timed_out": timed_out},
            )
        write = ServerWrite(db, slot, target, attempt, token)
        self._crashsafe_unit = write
        result = run_server_write(
            write,
            build,
            lambda stage: fenced_out_error(db, None, slot, target, attempt, token, None, stage),
        )
        record_commit(slot, target, attempt, token, {"unit_id": write.unit_id})
        return {**result, "token": token, "committed_by": attempt.describe(), "skipped": False}

    def _defer_to(self, slot: Slot, target: str, running: Unit, deadline: float | None) -> NoReturn:
        deadline = deadline or time.time() + self._adoption_timeout_seconds()
        log.info(
            "crashsafe: %s (target %s): the unit of %s is still running server-side (since %s); "
            "waiting in the triggerer to adopt its commit instead of redoing the work (until %s).",
            slot.describe(),
            target,
            running.describe(),
            running.started_at,
            datetime.fromtimestamp(deadline, tz=timezone.utc).isoformat(timespec="seconds"),
        )
        key = units.lock_key(slot, target)
        self.defer(
            trigger=UnitEndTrigger(conn_id=self.conn_id, lock=[key.k1, key.k2], deadline=deadline),
            method_name="resume_after_unit",
            kwargs={"awaited": running.as_dict(), "deadline": deadline},
        )

    def _adopted(
        self,
        db: Db,
        slot: Slot,
        target: str,
        attempt: Attempt,
        awaited: Mapping[str, Any],
        committed: CommittedBy,
    ) -> dict[str, Any]:
        unit = units.unit_by_id(db, str(awaited["unit_id"]))
        result = dict(unit.result) if unit is not None and unit.state == "committed" else {}
        by = committed.describe()
        log.info(
            "crashsafe: %s (target %s): adopted the work of %s, which committed server-side; "
            "nothing was run again.",
            slot.describe(),
            target,
            by,
        )
        record_event(
            "adopted",
            slot,
            target,
            attempt,
            committed.token,
            {
                "adopted_try": committed.try_number,
                "adopted_ti_id": committed.ti_id,
                "unit_id": awaited["unit_id"],
            },
        )
        return {
            **result,
            "token": None,
            "committed_by": by,
            "skipped": True,
            "adopted": True,
            "adopted_from": dict(awaited),
        }

    def _describe_target(self, db: Db, table: TableName, *, unique_keys: bool = True) -> TableInfo:
        info = describe_table(db, table, unique_keys=unique_keys)
        if info is None:
            raise checks.missing_table_error(table.display(), self.conn_id)
        return info


def source_columns(cursor: Any) -> list[str]:
    """Column names of the query just run; refuses duplicate names (which column would win?)."""
    names = [str(d[0]) for d in cursor.description or ()]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigurationError(
            f"The source query returns the column name(s) {dupes} more than once; alias them."
        )
    return names
