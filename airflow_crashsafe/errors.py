"""Every error airflow-crashsafe raises, in one hierarchy.

::

    CrashsafeError                      base; catch this to catch everything below
    ├── ConfigurationError              a [crashsafe] option, connection, setting or argument is wrong
                                        (also a ValueError, so ``except ValueError`` still catches it)
    ├── StoreError                      the crashsafe store cannot be reached or migrated
    ├── FencedOut                       a newer attempt holds the slot; this attempt's write rolled back
    ├── UnsafeWriteError                a write was refused before touching anything
    │   ├── NaturalKeyNotUniqueError    no unique index / primary key covers the natural key
    │   ├── GeneratedKeyError           a natural-key column is generated (identity, serial, random default)
    │   ├── DuplicateSourceKeysError    the source yields one natural key more than once
    │   ├── NondeterministicSourceError the source calls now(), random(), nextval(), ...
    │   ├── PartitionMismatchError      a partition overwrite produced rows outside its partition
    │   └── UnfenceableTableError       a table the write changes cannot be fenced (MyISAM, Aria, a
    │                                   foreign table, ...)
    ├── IncompleteRollbackError         a write was rolled back, but the database kept some of it
    ├── IdempotencyConflict             one idempotency key, two different payloads
    ├── ExternalCallFailed              the target refused the call, or never answered in time
    └── OutcomeUnknown                  an earlier attempt may have sent the call; not re-sent

Each message says what happened and what to do about it, because the person reading it is
usually on call at 03:00. Every configuration mistake (an option, a sinks file, a watchdog flag,
an operator or DAG-builder argument) raises ``ConfigurationError``; a plain ``ValueError`` means
malformed data from outside (an HTTP answer, a state file) or a programming mistake, never a
setting to fix.

Importing this module imports nothing else: the watchdog uses it without Airflow installed.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "CrashsafeError",
    "DuplicateSourceKeysError",
    "ExternalCallFailed",
    "FencedOut",
    "GeneratedKeyError",
    "IdempotencyConflict",
    "IncompleteRollbackError",
    "NaturalKeyNotUniqueError",
    "NondeterministicSourceError",
    "OutcomeUnknown",
    "PartitionMismatchError",
    "StoreError",
    "UnfenceableTableError",
    "UnsafeWriteError",
]


class CrashsafeError(Exception):
    """Base class of every error raised by airflow-crashsafe."""


class ConfigurationError(CrashsafeError, ValueError):
    """A [crashsafe] option, an Airflow connection, a setting or an argument is wrong.

    Also a :class:`ValueError`: a wrong value is what it is, and callers that caught the
    ``ValueError`` these mistakes once raised keep working.
    """


class StoreError(CrashsafeError):
    """The crashsafe store could not be reached, created or migrated."""


class FencedOut(CrashsafeError):
    """A newer attempt holds the slot's fencing token; this attempt's write was rolled back.

    Raised by a stale attempt (a zombie left running after a scheduler reset, or the earlier of
    two deliveries of the same try). Nothing it wrote is visible; the newer attempt's result stands.
    """

    def __init__(
        self, message: str, *, slot: object = None, token: int | None = None, newest_token: int | None = None
    ) -> None:
        super().__init__(message)
        self.slot = slot
        self.token = token
        self.newest_token = newest_token


class UnsafeWriteError(CrashsafeError):
    """A write was refused before anything was written, because re-running it would not be safe."""


class NaturalKeyNotUniqueError(UnsafeWriteError):
    """The natural key of a MERGE is not backed by a unique index or primary key."""


class GeneratedKeyError(UnsafeWriteError):
    """A natural-key column is generated (identity, serial, sequence or random default)."""


class DuplicateSourceKeysError(UnsafeWriteError):
    """The source rows of a MERGE repeat a natural key (or leave it NULL)."""


class NondeterministicSourceError(UnsafeWriteError):
    """The source query calls a function whose result differs between attempts."""


class PartitionMismatchError(UnsafeWriteError):
    """A partition overwrite's query produced rows outside the partition it replaces."""


class UnfenceableTableError(UnsafeWriteError):
    """A table the write changes cannot hold what the fence promises; refused before anything ran.

    A fence makes a stale attempt's write roll back, so it needs a table that rolls back with the
    fence's transaction: on MySQL/MariaDB an InnoDB table (MyISAM, Aria, MEMORY, CSV, ... cannot
    roll back, and no other engine is proven), on PostgreSQL neither a foreign table (the write
    goes to another server) nor an unlogged one (emptied by a crash while the fence says
    committed). The message names the table, its engine or kind, and the statement that fixes it.
    """


class IncompleteRollbackError(CrashsafeError):
    """A fenced write was rolled back, but the database says some of its changes stand.

    MySQL/MariaDB warn when a rolled-back transaction changed a table whose engine cannot roll
    back: a table the body wrote that crashsafe was not told about, or one a trigger or stored
    function wrote. Those changes are visible now, whatever the fence decided. The original
    error (:class:`FencedOut`, the body's exception) is this one's ``__cause__``.
    """


class IdempotencyConflict(CrashsafeError):
    """An idempotency key was reused with a different payload; nothing was sent."""


class OutcomeUnknown(CrashsafeError):
    """An earlier attempt recorded its intent to call but never its outcome; nothing was re-sent.

    Raised when the target is not known to honour idempotency keys (``on_unknown_outcome="fail"``):
    a person must check whether the call took effect and resolve the ledger entry.
    """


class ExternalCallFailed(CrashsafeError):
    """An external call failed: refused for good (4xx), or no answer after bounded retries.

    ``outcome_unknown`` says whether the target may still have acted (timeouts, 5xx).
    """

    def __init__(self, message: str, *, status: int | None = None, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.outcome_unknown = outcome_unknown
