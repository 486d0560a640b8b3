"""The crashsafe store: crashsafe's own records (docs/design.md, "Store").

It lives in the database of the Airflow connection ``[crashsafe] conn_id`` (PostgreSQL in
production, opened through the connection's own SQL hook; ``airflow_crashsafe.hooks.CrashsafeHook``
is the connection's Airflow hook) or, when that connection does not exist, in an embedded SQLite
file under ``$AIRFLOW_HOME`` (single machine only; said once in the log). The embedded fallback is
refused when ``[core] executor`` can run tasks on several hosts: each host would keep its own
ledger and fences, and a re-run on another host would find no intent and send again.

The schema migrates itself on first use. Every connection gets the store's connect and statement
timeouts (:mod:`~airflow_crashsafe.store.timeouts`). Connections are kept one per thread, because a
store is shared by a process's threads.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from airflow_crashsafe import config
from airflow_crashsafe.dsn import mask_dsn_text, safe_db_url
from airflow_crashsafe.errors import ConfigurationError, StoreError
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store import schema
from airflow_crashsafe.store.dbapi import Db, connect_target, connect_url
from airflow_crashsafe.store.events import EVENT_FIELDS, INSERT_EVENT
from airflow_crashsafe.store.timeouts import StoreTimeouts, apply_store_timeouts, timeout_error

__all__ = [
    "EVENT_KINDS",
    "Store",
    "connection_store",
    "open_store",
    "reset_store_cache",
    "store_connection_exists",
]

log = logging.getLogger(__name__)

#: What fenced writes record. Later capabilities add kinds; readers ignore kinds they do not know.
EVENT_KINDS = ("committed", "fenced_out", "skipped_committed")


class Store:
    """crashsafe's own tables, behind a narrow interface; the only code that knows their SQL."""

    def __init__(
        self,
        connect: Callable[[], Db],
        location: str,
        *,
        timeouts: StoreTimeouts | None = None,
        dsn: str | None = None,
    ) -> None:
        """``location`` names the store in errors (never with a password); ``dsn``: the URL
        ``connect`` opens, whose password is masked wherever a driver's error quotes it."""
        self._connect = connect
        self.location = location
        self._dsn = dsn
        self._timeouts = timeouts  # None: the configured ones, read at the first connect
        self._local = threading.local()
        # Every thread's connection, so close() can close the ones no running thread still uses.
        self._opened: dict[int, tuple[threading.Thread, Db]] = {}
        self._generation = 0  # bumped by close(): other threads then reconnect at their next use
        self._migrated = False
        self._migrate_lock = threading.Lock()

    def _db(self) -> Db:
        db = getattr(self._local, "db", None)
        if db is not None and (getattr(self._local, "generation", -1) != self._generation or db.is_broken()):
            self.discard_connection()  # closed by close() elsewhere, or lost (server restart, failover)
            db = None
        if db is None:
            db = self._open()
            self._local.db = db
            self._local.generation = self._generation
            self._register(db)
        return db

    def _register(self, db: Db) -> None:
        """Track this thread's new connection; close those of threads that have ended.

        A finished thread's id is reused by the next thread, so without this its connection would
        be dropped unclosed when the new thread registers under the same id.
        """
        me, current = threading.get_ident(), threading.current_thread()
        with self._migrate_lock:
            ended = [
                ident
                for ident, (thread, _) in self._opened.items()
                if not thread.is_alive() or (ident == me and thread is not current)
            ]
            stale = [self._opened.pop(ident)[1] for ident in ended]
            self._opened[me] = (current, db)
        for old in stale:
            old.close()

    @property
    def timeouts(self) -> StoreTimeouts:
        """The connect and statement timeouts of this store's connections."""
        if self._timeouts is None:
            self._timeouts = StoreTimeouts.configured(f"The crashsafe store at {self.location}")
        return self._timeouts

    def _open(self) -> Db:
        """A new connection, the schema migrated, its statements bounded by the statement timeout.

        The migration runs before the timeout applies: it may rightly wait for another process's.
        """
        timeouts = self.timeouts
        failed: StoreError | None = None
        try:
            db = self._connect()
        except StoreError:
            raise
        except Exception as exc:
            failed = self._unreachable(exc)
            if failed.__cause__ is not None:  # the driver's error holds no password: keep it chained
                raise failed from exc
        if failed is not None:  # raised out here, so that not even as context does that error travel
            raise failed
        try:
            if not self._migrated:
                with self._migrate_lock:
                    if not self._migrated:
                        schema.migrate(db)
                        self._migrated = True
            apply_store_timeouts(db, timeouts)
        except BaseException:
            db.close()
            raise
        return db

    def _unreachable(self, exc: BaseException) -> StoreError:
        """The StoreError for a failed connect; its ``__cause__`` is ``exc`` unless that quoted a password."""
        reason = mask_dsn_text(str(exc), self._dsn)
        if "timeout" in str(exc).lower():
            error = self.timeouts.connect_error(reason.strip().split("\n")[0])
        else:
            error = StoreError(
                f"The crashsafe store at {self.location} cannot be reached ({reason}); check the "
                f"connection {config.store_conn_id()!r} or [crashsafe] embedded_path."
            )
        error.__cause__ = exc if reason == str(exc) else None
        return error

    def clear_error(self, db: Db, exc: BaseException) -> None:
        """Raise the clear :class:`StoreError` when ``exc`` is a store timeout firing, else return."""
        error = timeout_error(db, exc)
        if error is not None:
            raise error from exc

    def migrate(self) -> int:
        """Bring the schema up to date (also done on first use) and return its version."""
        db = self._db()
        return schema.migrate(db)

    @contextmanager
    def transaction(self, *, immediate: bool = True) -> Iterator[Db]:
        """This thread's connection inside one transaction: committed on exit, rolled back on error.

        For the store-layer modules (``store.ledger``, ``store.fences``) that hold the SQL.
        """
        db = self._db()
        try:
            db.begin(immediate=immediate)
            yield db
            db.commit()
        except BaseException as exc:
            self._rollback(db)
            self.clear_error(db, exc)
            raise

    def _rollback(self, db: Db) -> None:
        """Roll back; a connection too broken to roll back is dropped, never hiding the first error."""
        try:
            db.rollback()
        except Exception:
            log.debug("crashsafe: store rollback failed; reconnecting at next use", exc_info=True)
            self.discard_connection()

    def connection(self) -> Db:
        """This thread's connection, outside any transaction (for ``fences.issue_token``)."""
        return self._db()

    def discard_connection(self) -> None:
        """Close and forget this thread's connection (after an error broke it, e.g. a DB restart).

        The next use in this thread connects afresh; other threads' connections are untouched.
        """
        db = getattr(self._local, "db", None)
        if db is None:
            return
        self._local.db = None
        with self._migrate_lock:
            self._opened.pop(threading.get_ident(), None)
        db.close()

    def schema_version(self) -> int:
        db = self._db()
        db.begin()
        try:
            return schema.current_version(db)
        finally:
            self._rollback(db)

    def record_event(
        self,
        kind: str,
        slot: Slot,
        target: str,
        attempt: Attempt,
        *,
        token: int | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one event about a slot's attempt (one autocommitted statement)."""
        db = self._db()
        try:
            db.execute_alone(
                INSERT_EVENT,
                {
                    "kind": kind,
                    "dag_id": slot.dag_id,
                    "task_id": slot.task_id,
                    "map_index": slot.map_index,
                    "slot_partition": slot.partition,
                    "target": target,
                    "run_id": attempt.run_id,
                    "try_number": attempt.try_number,
                    "ti_id": attempt.ti_id,
                    "clear_number": attempt.clear_number,
                    "hostname": attempt.hostname,
                    "pid": attempt.pid,
                    "token": token,
                    "detail": json.dumps(dict(detail or {}), default=str, sort_keys=True),
                },
            )
        except Exception as exc:
            if db.is_broken():
                self.discard_connection()
            self.clear_error(db, exc)
            raise

    def events(
        self, *, dag_id: str | None = None, kinds: Iterable[str] | None = None
    ) -> list[dict[str, Any]]:
        """Events, oldest first, optionally for one DAG and some kinds."""
        where, params = [], {}
        if dag_id is not None:
            where.append("dag_id = %(dag_id)s")
            params["dag_id"] = dag_id
        kind_list = list(kinds or ())
        if kind_list:
            names = [f"%(kind{i})s" for i in range(len(kind_list))]
            where.append(f"kind IN ({', '.join(names)})")
            params.update({f"kind{i}": kind for i, kind in enumerate(kind_list)})
        sql = f"SELECT {', '.join(EVENT_FIELDS)} FROM crashsafe_events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.transaction(immediate=False) as tx:
            rows = tx.execute(sql + " ORDER BY id", params).fetchall()
        events = [dict(zip(EVENT_FIELDS, row, strict=True)) for row in rows]
        for event in events:
            event["detail"] = json.loads(event["detail"] or "{}")
        return events

    def close(self) -> None:
        """Close this thread's connection and those of finished threads.

        A connection another thread is using right now is never closed under it (with sqlite3 that
        crashes the process); that thread drops it and reconnects at its next use.
        """
        me = threading.get_ident()
        with self._migrate_lock:
            self._generation += 1
            closing = [
                ident for ident, (thread, _) in self._opened.items() if ident == me or not thread.is_alive()
            ]
            dbs = [self._opened.pop(ident)[1] for ident in closing]
        self._local.db = None
        for db in dbs:
            db.close()


_stores: dict[str, Store] = {}
_stores_lock = threading.Lock()
_said_embedded = False


def store_connection_exists(conn_id: str) -> bool:
    """Whether Airflow knows the connection ``conn_id`` here (else the embedded store is used)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def connection_store(conn_id: str) -> Store:
    """A new store in the database of Airflow connection ``conn_id`` (not cached: close it)."""

    def connect() -> Db:
        return connect_target(conn_id, link=store.timeouts.link_params())

    store = Store(connect, location=f"connection {conn_id!r}")
    return store


def _embedded_store(conn_id: str) -> Store:
    """The embedded SQLite store, unless ``[core] executor`` can run tasks on several hosts."""
    global _said_embedded
    path = config.embedded_store_path()
    fleet = config.multi_host_executors()
    if fleet and not config.allow_embedded_store_on_fleet():
        raise ConfigurationError(
            f"No Airflow connection {conn_id!r} (the crashsafe store) is visible here, and "
            f"[core] executor = {', '.join(fleet)} runs tasks on several hosts: an embedded SQLite "
            f"file per host ({path}) would split the ledger and the fences, and a re-run on another "
            f"host would send again. Create the connection on every host that runs tasks, e.g. "
            f"AIRFLOW_CONN_{conn_id.upper()}=postgresql://user:pass@host:5432/crashsafe or in the UI "
            f"(Admin > Connections), then run `airflow-crashsafe db migrate`. If every task really "
            "runs on this one host, set [crashsafe] allow_embedded_store_on_fleet = True."
        )
    if not _said_embedded:
        log.info(
            "crashsafe: no Airflow connection %r, using the embedded store %s "
            "(single machine only; create the connection for PostgreSQL).",
            conn_id,
            path,
        )
        _said_embedded = True
    path.parent.mkdir(parents=True, exist_ok=True)
    return Store(lambda: connect_url(f"sqlite:///{path}"), location=str(path))


def open_store(url: str | None = None) -> Store:
    """The process's store: ``url`` if given, else ``[crashsafe] conn_id``, else embedded SQLite.

    Raises :class:`ConfigurationError` instead of the embedded store when the executor can run
    tasks on several hosts (unless ``[crashsafe] allow_embedded_store_on_fleet``).
    """
    with _stores_lock:
        key = url or "<configured>"
        if key in _stores:
            return _stores[key]
        if url is not None:
            store = Store(
                lambda: connect_url(url, link=store.timeouts.link_params()), safe_db_url(url), dsn=url
            )
        else:
            conn_id = config.store_conn_id()
            store = (
                connection_store(conn_id) if store_connection_exists(conn_id) else _embedded_store(conn_id)
            )
        _stores[key] = store
        return store


def reset_store_cache() -> None:
    """Close and forget every opened store (tests switch stores between cases)."""
    with _stores_lock:
        for store in _stores.values():
            store.close()
        _stores.clear()
