"""``fenced_transaction``: a write that commits only if its attempt is still the newest.

The token is issued (and committed) in a transaction of its own when the attempt starts work, so
a newer attempt becomes visible to an older one at once. The write then runs in a second
transaction whose last statement locks the fence row and checks the token; a stale attempt's
write is rolled back and raises :class:`~airflow_crashsafe.errors.FencedOut`. A retry that finds
the slot committed in its clear generation does nothing (docs/design.md, "Committed means done").

Before the token, the tables the body changes are checked (:mod:`airflow_crashsafe.sql.fenceable`:
on MySQL/MariaDB the target when it names a table, ``tables=``, and the fence table must be
InnoDB). A rollback that the database says left changes standing (a table nobody named, written
by the body, a trigger or a stored function) raises
:class:`~airflow_crashsafe.errors.IncompleteRollbackError` instead of pretending nothing was written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.admission.worker import recovery_admission
from airflow_crashsafe.errors import CrashsafeError, IncompleteRollbackError
from airflow_crashsafe.fencing.events import fenced_out_error, record_commit, record_skip
from airflow_crashsafe.identity import (
    Attempt,
    Slot,
    attempt_from_context,
    current_context,
    slot_from_context,
)
from airflow_crashsafe.sql.fenceable import check_body_tables
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.dbapi import Db, connect_target
from airflow_crashsafe.store.dialects import say_limits
from airflow_crashsafe.store.fences import CommittedBy
from airflow_crashsafe.store.store import Store

__all__ = ["FencedTransaction", "fenced_transaction", "open_write"]

log = logging.getLogger(__name__)


class FencedTransaction:
    """What the body of ``with fenced_transaction(...) as tx`` works with.

    :ivar token: the fencing token issued to this attempt (None when already committed).
    :ivar already_committed: the slot's work is done in this clear generation; do not redo it.
    :ivar committed_by: which attempt committed it, when ``already_committed``.
    :ivar params: query parameters naming the token and try, to store with the output.
    """

    def __init__(
        self,
        db: Db,
        slot: Slot,
        target: str,
        attempt: Attempt,
        token: int | None,
        committed_by: CommittedBy | None,
    ) -> None:
        self.db = db
        self.slot = slot
        self.target = target
        self.attempt = attempt
        self.token = token
        self.committed_by = committed_by
        self._cursor: Any = None

    @property
    def already_committed(self) -> bool:
        return self.committed_by is not None

    @property
    def cursor(self) -> Any:
        """A DB-API cursor inside the open, fenced transaction."""
        if self.committed_by is not None:
            raise CrashsafeError(
                f"Slot {self.slot.describe()} was already committed by "
                f"{self.committed_by.describe()}; check tx.already_committed before writing."
            )
        if self._cursor is None:
            self._cursor = self.db.raw.cursor()
        return self._cursor

    @property
    def params(self) -> dict[str, Any]:
        return {"crashsafe_token": self.token, "crashsafe_try_number": self.attempt.try_number}

    def cancel(self) -> None:
        """Cancel the running statement (from ``on_kill``, a signal handler or another thread)."""
        self.db.cancel()


@contextmanager
def fenced_transaction(
    conn_id: str,
    target: str,
    *,
    context: Mapping[str, Any] | None = None,
    slot_partition: str | None = None,
    db: Db | None = None,
    store: Store | None = None,
    recovery_resource: str | None = None,
    recovery_concurrency: int | None = None,
    deadline: Deadline | None = None,
    tables: Sequence[str] | None = None,
) -> Iterator[FencedTransaction]:
    """Run the body's writes to ``conn_id`` as one fenced transaction on behalf of this attempt.

    :param conn_id: Airflow connection of the database written to (docs/databases.md lists them).
    :param target: what is written (usually the table); one slot may write several targets.
    :param tables: the tables the body changes besides ``target`` (``table`` or ``schema.table``),
        checked before the token: on MySQL/MariaDB each must be InnoDB (the target too, when it
        names a table), on PostgreSQL neither foreign nor unlogged; a table that cannot roll
        back with the fence raises :class:`~airflow_crashsafe.errors.UnfenceableTableError`.
    :param context: the task context; defaults to the running task's.
    :param slot_partition: override of the slot's partition (default: the logical date, else run id).
    :param db: an already open connection to use instead of opening ``conn_id`` (closed by caller).
    :param store: the crashsafe store to record events in (default: the configured one).
    :param recovery_resource: the recovery budget a re-run that must write waits for a place of
        (default ``conn_id``; docs/design.md, "Recovery admission"), with ``recovery_concurrency``
        places (default ``[crashsafe] recovery_concurrency``) and ``deadline`` for its rank.
    """
    ctx = current_context(context)
    slot = slot_from_context(ctx, slot_partition)
    attempt = attempt_from_context(ctx)
    owns_db = db is None
    conn = db if db is not None else connect_target(conn_id)
    try:
        say_limits(conn, log)
        checked = check_body_tables(conn, target, tables)
        if conn.dialect.is_mysql and not checked:
            log.warning(
                "crashsafe: target %r names no table in this database and no tables= were given: the "
                "tables the body changes were not checked for an engine that rolls back with the "
                "fence (a rollback that leaves changes raises IncompleteRollbackError). Pass tables=[...].",
                target,
            )
        if conn.dialect.is_postgres and tables:
            conn.rollback()  # end the catalog read: the token is issued in autocommit
        issue = fences.issue_token(conn, slot, target, attempt)
        if issue.already_committed is not None:
            log.info(
                "crashsafe: %s (target %r) is already committed by %s; skipping the work.",
                slot.describe(),
                target,
                issue.already_committed.describe(),
            )
            record_skip(slot, target, attempt, issue.already_committed, store)
            yield FencedTransaction(conn, slot, target, attempt, None, issue.already_committed)
            return
        if issue.token is None:
            raise fenced_out_error(conn, store, slot, target, attempt, None, issue.newer, "start")
        admission = recovery_admission(
            recovery_resource or conn_id,
            context=ctx,
            concurrency=recovery_concurrency,
            deadline=deadline,
            store=store,
        )
        with admission, open_write(conn, slot, target, attempt, issue.token, store) as tx:
            yield tx
    finally:
        if owns_db:
            conn.close()


@contextmanager
def open_write(
    db: Db, slot: Slot, target: str, attempt: Attempt, token: int, store: Store | None = None
) -> Iterator[FencedTransaction]:
    """The write of an attempt holding ``token``: commit it only if the token is still the newest.

    The body runs in one transaction that ends by locking the fence row and checking the token;
    a stale attempt's write is rolled back and raises :class:`~airflow_crashsafe.errors.FencedOut`.
    """
    tx = FencedTransaction(db, slot, target, attempt, token, None)
    # SQLite has one writer: the body holds the write lock from its start, so a read before
    # its first write can never be invalidated by another commit (SQLITE_BUSY_SNAPSHOT).
    db.begin(immediate=True)
    try:
        yield tx
        committed = fences.commit_write(db, slot, target, attempt, token)
    except BaseException as exc:
        if _roll_back(db) and isinstance(exc, Exception):
            raise _incomplete(slot, target, attempt, f"the write failed ({type(exc).__name__})") from exc
        raise
    if not committed:
        left = _roll_back(db)
        error = fenced_out_error(db, store, slot, target, attempt, token, None, "commit")
        if left:
            raise _incomplete(slot, target, attempt, "a newer attempt holds the slot") from error
        raise error
    record_commit(slot, target, attempt, token, {}, store)


def _roll_back(db: Db) -> bool:
    """Roll the write back; whether the database says changes stood all the same."""
    try:
        db.rollback()
    except Exception:  # a broken connection must not hide the error that broke it
        log.warning("crashsafe: rollback failed after an error", exc_info=True)
        return False
    return db.rollback_left_changes


def _incomplete(slot: Slot, target: str, attempt: Attempt, why: str) -> IncompleteRollbackError:
    error = IncompleteRollbackError(
        f"The write of {attempt.describe()} to {slot.describe()} (target {target!r}) was rolled back "
        f"({why}), but MySQL/MariaDB says changes to tables that cannot roll back stand (warning "
        "1196): the body, or a trigger or stored function it set off, changed a table that is not "
        "InnoDB, and those changes are visible now whatever the fence decided (a temporary table "
        "on such an engine counts too; then nothing outside the session changed). Find it (SELECT "
        "TABLE_SCHEMA, TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE ENGINE <> 'InnoDB'), "
        "check what it holds, convert it (ALTER TABLE ... ENGINE=InnoDB) and name it in tables= so "
        "that such a write is refused before it runs."
    )
    log.error("crashsafe: %s", error)
    return error
