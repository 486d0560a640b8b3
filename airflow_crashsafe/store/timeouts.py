"""Connect and statement timeouts of the crashsafe store's connections (docs/design.md, "Store").

A store that accepts connections and never answers, or a statement stuck behind a lock, must fail
the task with a clear :class:`StoreError` within a bound, not block it for hours. Target databases
get none of this: a fenced write may rightly run for hours.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from airflow_crashsafe import config
from airflow_crashsafe.dsn import mask_dsn_text
from airflow_crashsafe.errors import StoreError
from airflow_crashsafe.store.dbapi import Db

__all__ = ["StoreTimeouts", "apply_store_timeouts", "lift_statement_timeout", "timeout_error"]


@dataclass(frozen=True)
class StoreTimeouts:
    """How long the crashsafe store may take to open a connection and to run one statement.

    ``where`` names the store in the errors.
    """

    connect: float
    statement: float
    where: str = "the crashsafe store"

    @classmethod
    def configured(cls, where: str) -> StoreTimeouts:
        """``[crashsafe] store_connect_timeout_seconds`` and ``store_statement_timeout_seconds``."""
        return cls(config.store_connect_timeout_seconds(), config.store_statement_timeout_seconds(), where)

    @property
    def connect_seconds(self) -> int:
        """libpq's ``connect_timeout``: whole seconds, at least 2 (libpq's own minimum)."""
        return max(2, int(-(-self.connect // 1)))

    def client_deadline(self) -> float:
        """How long a client waits for any one answer: the server's own timeout had its chance first."""
        return self.statement + self.connect

    def statement_error(self, exc: BaseException | None = None) -> StoreError:
        return _error(
            f"{self.where} did not finish a statement within {self.statement:g} s",
            exc,
            "it is overloaded, locked or unreachable. Check the store's health; raise [crashsafe] "
            "store_statement_timeout_seconds only if its statements are legitimately slower.",
        )

    def unanswered_error(self, exc: BaseException | None = None) -> StoreError:
        return _error(
            f"{self.where} did not answer within {self.client_deadline():g} s",
            exc,
            "the server or the network to it is hung (the connection is dropped; the next use "
            "reconnects). Check the store's health and the network path to it.",
        )

    def error_for(self, exc: BaseException) -> StoreError | None:
        """The clear :class:`StoreError` for ``exc`` when it is a store timeout firing, else None.

        PostgreSQL cancels a statement with SQLSTATE 57014 (``statement_timeout``); SQLite gives
        up waiting for its write lock with "database is locked" (the busy timeout).
        """
        if isinstance(exc, StoreError):
            return None
        if (
            getattr(exc, "sqlstate", None) == _QUERY_CANCELED
            or getattr(exc, "pgcode", None) == _QUERY_CANCELED
        ):
            return self.statement_error(exc)
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return self.statement_error(exc)
        return None

    def link_params(self) -> dict[str, int]:
        """libpq parameters of a store connection: the connect timeout and TCP keepalives.

        Keepalives and ``tcp_user_timeout`` notice a peer that vanished (host down, network
        partition) within about the client deadline, even between statements; a server that is up
        but silent is left to the client deadline (:mod:`~airflow_crashsafe.store.client_deadline`).
        """
        probe = max(1, int(self.connect_seconds))
        return {
            "connect_timeout": self.connect_seconds,
            "keepalives": 1,
            "keepalives_idle": probe,
            "keepalives_interval": probe,
            "keepalives_count": 3,
            "tcp_user_timeout": int(self.client_deadline() * 1000),
        }

    def connect_error(self, reason: str) -> StoreError:
        """``reason``: the driver's error, already without the store URL's password."""
        return StoreError(
            f"{self.where} did not accept a connection within {self.connect_seconds} s "
            f"({reason}): check that it is up and reachable from this host; "
            "[crashsafe] store_connect_timeout_seconds sets the wait."
        )


def _error(what: str, exc: BaseException | None, advice: str) -> StoreError:
    reason = f" ({_first_line(exc)})" if exc is not None else ""
    return StoreError(f"{what}{reason}: {advice}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return mask_dsn_text(text.splitlines()[0]) if text else type(exc).__name__


_QUERY_CANCELED = "57014"


def timeout_error(db: Db, exc: BaseException) -> StoreError | None:
    """The clear :class:`StoreError` for a store statement that ran out of time, else None."""
    timeouts = db.timeouts
    return None if timeouts is None else timeouts.error_for(exc)


def apply_store_timeouts(db: Db, timeouts: StoreTimeouts) -> None:
    """Bound every statement on a fresh store connection (session-wide, committed at once).

    PostgreSQL: ``SET statement_timeout`` in autocommit, so no rollback undoes it (a startup
    ``options=-c ...`` would be refused by PgBouncer). SQLite: the busy timeout, the only wait a
    SQLite statement has.
    """
    millis = max(1, int(timeouts.statement * 1000))
    if db.dialect.is_postgres:
        with db.autocommit(), db.raw.cursor() as cursor:  # psycopg 2 has no connection.execute
            cursor.execute(f"SET statement_timeout = {millis}")
    else:
        db.raw.execute(f"PRAGMA busy_timeout = {millis}")
    db.timeouts = timeouts


def lift_statement_timeout(db: Db) -> None:
    """Inside an open transaction: no statement timeout until it ends (administrative bulk work).

    ``db prune`` may delete millions of rows in one statement; the store's per-statement bound is
    for tasks, not for an operator who asked for it. SQLite's busy timeout is left as it is.
    """
    if db.dialect.is_postgres:
        db.execute("SET LOCAL statement_timeout = 0")
