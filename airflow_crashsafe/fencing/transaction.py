"""``fenced_transaction``: a write that commits only if its attempt is still the newest.

The token is issued (and committed) in a transaction of its own when the attempt starts work, so
a newer attempt becomes visible to an older one at once. The write then runs in a second
transaction whose last statement locks the fence row and checks the token; a stale attempt's
write is rolled back and raises :class:`~airflow_crashsafe.errors.FencedOut`. A retry that finds
the slot committed in its clear generation does nothing (docs/design.md, "Committed means done").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow_crashsafe.admission.rules import Deadline
from airflow_crashsafe.admission.worker import recovery_admission
from airflow_crashsafe.errors import CrashsafeError
from airflow_crashsafe.fencing.events import fenced_out_error, record_commit, record_skip
from airflow_crashsafe.identity import (
    Attempt,
    Slot,
    attempt_from_context,
    current_context,
    slot_from_context,
)
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
) -> Iterator[FencedTransaction]:
    """Run the body's writes to ``conn_id`` as one fenced transaction on behalf of this attempt.

    :param conn_id: Airflow connection of the database written to (PostgreSQL or SQLite).
    :param target: what is written (usually the table); one slot may write several targets.
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
        if not fences.commit_write(db, slot, target, attempt, token):
            db.rollback()
            raise fenced_out_error(db, store, slot, target, attempt, token, None, "commit")
    except BaseException:
        try:
            db.rollback()
        except Exception:  # a broken connection must not hide the error that broke it
            log.warning("crashsafe: rollback failed after an error", exc_info=True)
        raise
    record_commit(slot, target, attempt, token, {}, store)
