"""Fencing a Delta Lake write with the table's own transaction protocol: no fence table needed.

A Delta commit may carry ``txn`` actions, an application id and a version each, which the table
keeps as its transaction state (``DeltaTable.transaction_version(app_id)``). That is a fence row
the table maintains itself (docs/databases.md, "Delta Lake"):

- the **slot** (and target) is the application id: ``crashsafe:<dag>/<task>/<map>/<partition>/<target>``;
- the **fencing token** is the version, ordered as tokens are: clear generation, then try, then
  the attempt's start time (so of two deliveries of one try the later starter wins):
  ``clear << 52 | try << 40 | milliseconds since 2020 (40 bits)``;
- **committed means done**: a recorded version of this clear generation means the slot is done;
  a version above ours means a newer attempt holds the slot (``FencedOut``);
- **a token at start**, as for SQL writes: the attempt is issued a fencing token in the crashsafe
  store's fence table (target ``delta:<uri>``) before its source runs, so an older attempt is
  refused once a newer one has *started*, not only once it has committed;
- **the fence check**: the commit runs while the store's fence row is locked by the check that
  our token is still the newest (the SQL fence check), so no newer attempt can start between the
  check and the commit. The table's version is read on the snapshot the write commits against,
  and the commit is made with no retry: if any other commit lands in between, Delta's optimistic
  concurrency refuses ours (``CommitFailedError``); we then read the version again, and a newer
  attempt's commit makes ours ``FencedOut``, anything else is tried again on the new snapshot.
  The source is read before the lock, so only the Delta write itself holds it.

delta-rs itself accepts a ``txn`` version lower than the table's (the protocol leaves that check
to the writer), which is why the version is checked on the very snapshot that is committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing.events import fenced_out_error, record_event, record_skip
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import fences
from airflow_crashsafe.store.store import Store, open_store

__all__ = [
    "DeltaFence",
    "DeltaOutcome",
    "delta_app_id",
    "delta_fence_target",
    "delta_version",
    "describe_version",
]

log = logging.getLogger(__name__)

_EPOCH = datetime(2020, 1, 1, tzinfo=timezone.utc)
_MS_BITS, _TRY_BITS = 40, 12
_MAX_ATTEMPTS = 5  # commits tried while unrelated commits (other partitions) keep landing first


def delta_app_id(slot: Slot, target: str) -> str:
    """The Delta transaction application id of (slot, target)."""
    return f"crashsafe:{slot.dag_id}/{slot.task_id}/{slot.map_index}/{slot.partition}/{target}"


def delta_fence_target(uri: str) -> str:
    """The target of the table's fence row in the crashsafe store (apart from SQL tables' names)."""
    return f"delta:{uri}"


class _Stale(Exception):
    """A newer attempt holds the store's fence row: roll the check's transaction back."""


def delta_version(attempt: Attempt) -> int:
    """This attempt's fencing token as a Delta ``txn`` version (see the module doc)."""
    started = (
        attempt.started_at if attempt.started_at.tzinfo else attempt.started_at.replace(tzinfo=timezone.utc)
    )
    millis = int((started - _EPOCH).total_seconds() * 1000) & ((1 << _MS_BITS) - 1)
    tries = min(attempt.try_number, (1 << _TRY_BITS) - 1)
    return (attempt.clear_number << (_MS_BITS + _TRY_BITS)) | (tries << _MS_BITS) | millis


def describe_version(version: int) -> str:
    """``clear 0, try 2`` for a version made by :func:`delta_version`."""
    clear = version >> (_MS_BITS + _TRY_BITS)
    tries = (version >> _MS_BITS) & ((1 << _TRY_BITS) - 1)
    return f"clear {clear}, try {tries}"


@dataclass(frozen=True)
class DeltaOutcome:
    """What a fenced Delta write did: committed (with the table version) or skipped."""

    skipped: bool
    token: int
    committed_by: str
    table_version: int | None = None
    #: The fencing token the store issued this attempt at start (None: skipped before one was needed).
    fence_token: int | None = None


class DeltaFence:
    """The fence of one attempt on one Delta table, for one slot and target."""

    def __init__(
        self,
        uri: str,
        slot: Slot,
        target: str,
        attempt: Attempt,
        storage_options: dict[str, str] | None = None,
        store: Store | None = None,
    ) -> None:
        self.uri = uri
        self.slot = slot
        self.target = target
        self.attempt = attempt
        self.storage_options = storage_options
        self.app_id = delta_app_id(slot, target)
        self.token = delta_version(attempt)
        self.fence_target = delta_fence_target(uri)
        self._store = store

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store()
        return self._store

    def _table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.storage_options)

    def _committed(self, recorded: int | None) -> bool:
        same_generation = (
            recorded is not None and recorded >> (_MS_BITS + _TRY_BITS) == self.attempt.clear_number
        )
        return same_generation and recorded is not None and recorded <= self.token

    def _fenced_out(self, recorded: int, stage: str) -> FencedOut:
        record_event(
            "fenced_out",
            self.slot,
            self.target,
            self.attempt,
            self.token,
            {"stage": stage, "newest_token": recorded, "delta_app_id": self.app_id},
            self.store,
        )
        return FencedOut(
            f"Stale attempt {self.attempt.describe()} of {self.slot.describe()} (Delta table {self.uri}) "
            f"was fenced out at {stage}: the table records a newer attempt ({describe_version(recorded)}) "
            "for this slot. Nothing this attempt wrote was committed; the newer attempt's output "
            "stands. No action needed unless this repeats.",
            slot=self.slot,
            token=self.token,
            newest_token=recorded,
        )

    def _known(self, table: Any, stage: str) -> DeltaOutcome | None:
        """The table's txn state decides first: committed in our generation (skip) or newer (refused)."""
        recorded = table.transaction_version(self.app_id)
        if recorded is None:
            return None
        if self._committed(recorded):  # our generation, at or below our version: done
            return self._skip(recorded)
        if recorded > self.token:
            raise self._fenced_out(recorded, stage)
        return None

    def start(self) -> tuple[DeltaOutcome | None, int | None]:
        """Read the table's txn state, then take a fencing token in the store, as a SQL write does.

        ``(outcome, None)`` when the slot is already committed (skip); ``(None, token)`` to write.
        A newer attempt already holding the slot raises :class:`FencedOut`.
        """
        known = self._known(self._table(), "start")
        if known is not None:
            return known, None
        db = self.store.connection()
        issue = fences.issue_token(db, self.slot, self.fence_target, self.attempt)
        if issue.already_committed is not None:
            record_skip(self.slot, self.fence_target, self.attempt, issue.already_committed, self.store)
            log.info(
                "crashsafe: %s was already committed to Delta table %s by %s; not writing again.",
                self.slot.describe(),
                self.uri,
                issue.already_committed.describe(),
            )
            return DeltaOutcome(True, self.token, issue.already_committed.describe()), None
        if issue.token is None:
            raise fenced_out_error(
                db, self.store, self.slot, self.fence_target, self.attempt, None, issue.newer, "start"
            )
        return None, issue.token

    def write(self, source: Callable[[], Any], commit: Callable[[Any, Any, Any], None]) -> DeltaOutcome:
        """Run ``commit(table, data, commit_properties)`` once per slot, fenced at start and at commit.

        ``source()`` gives the rows (read before the store's fence row is locked); ``commit`` must
        write them to ``table`` (the snapshot just checked) with the given ``commit_properties``.
        Both are called again on a newer snapshot only when an unrelated commit got in first.
        """
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError

        known, fence_token = self.start()
        if known is not None:
            return known
        assert fence_token is not None
        for _ in range(_MAX_ATTEMPTS):
            data = source()
            table = self._table()
            known = self._known(table, "commit")
            if known is not None:
                return known
            properties = CommitProperties(
                app_transactions=[Transaction(self.app_id, self.token)],
                custom_metadata={"crashsafe_attempt": self.attempt.describe()},
                max_commit_retries=0,  # any commit landing first fails ours: then look again
            )
            try:
                with self.store.transaction() as db:
                    # The SQL fence check: locks the fence row until the Delta commit is made.
                    if not fences.commit_token(db, self.slot, self.fence_target, self.attempt, fence_token):
                        raise _Stale
                    commit(table, data, properties)
            except _Stale:
                raise fenced_out_error(
                    self.store.connection(),
                    self.store,
                    self.slot,
                    self.fence_target,
                    self.attempt,
                    fence_token,
                    None,
                    "commit",
                ) from None
            except CommitFailedError:
                latest = self._table().transaction_version(self.app_id)
                if latest is not None and latest > self.token:
                    raise self._fenced_out(latest, "commit") from None
                log.info("crashsafe: another commit to %s landed first; trying again on it", self.uri)
                continue
            version = int(self._table().version())
            record_event(
                "committed",
                self.slot,
                self.target,
                self.attempt,
                self.token,
                {"delta_version": version, "fence_token": fence_token},
                self.store,
            )
            log.info(
                "crashsafe: committed %s to Delta table %s as %s (txn %s = %s, table version %s, "
                "fencing token %s).",
                self.slot.describe(),
                self.uri,
                self.attempt.describe(),
                self.app_id,
                self.token,
                version,
                fence_token,
            )
            return DeltaOutcome(False, self.token, self.attempt.describe(), version, fence_token)
        raise RuntimeError(
            f"Delta table {self.uri}: {_MAX_ATTEMPTS} commits in a row lost to other writers; retry the task."
        )

    def _skip(self, recorded: int) -> DeltaOutcome:
        by = f"{describe_version(recorded)} (Delta txn {self.app_id} = {recorded})"
        record_event(
            "skipped_committed",
            self.slot,
            self.target,
            self.attempt,
            None,
            {"delta_version": recorded},
            self.store,
        )
        log.info(
            "crashsafe: %s was already committed to Delta table %s by %s; not writing again.",
            self.slot.describe(),
            self.uri,
            by,
        )
        return DeltaOutcome(True, recorded, by)
