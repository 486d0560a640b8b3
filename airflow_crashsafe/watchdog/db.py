"""Read an :class:`~airflow_crashsafe.watchdog.health.Observation` straight from Airflow's metadata DB.

For when the watchdog must not depend on the api-server. Same logic as ``airflow jobs check``:
the ``job`` rows in state ``running`` (a SIGKILLed scheduler's row stays ``running``, so the
heartbeat decides), plus the newest row of each job type for components that have none running.
PostgreSQL goes through psycopg (3), SQLite through the stdlib, both imported only when used;
a fresh connection per poll, read-only, with short timeouts. ``dag_run`` and ``task_instance``
are read when present (canary, running tasks) and noted when not. On PostgreSQL, with a
:class:`~airflow_crashsafe.watchdog.wedge.WedgeWatch`, each poll also looks for a dead
scheduler's open transaction and, with ``--heal``, ends it (``pg_terminate_backend`` is allowed
in a read-only session).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.dsn import mask_dsn_text, safe_db_url
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import (
    COMPONENT_OF_JOB_TYPE,
    JOB_TYPES,
    JobRecord,
    Observation,
    parse_timestamp,
)
from airflow_crashsafe.watchdog.wedge import IdleTransaction, WedgeWatch

if TYPE_CHECKING:
    from airflow_crashsafe.watchdog.runs import RunReader

__all__ = ["DbSource", "refused_login"]

_RUNNING_JOBS = (
    "SELECT id, job_type, state, latest_heartbeat, hostname FROM job "
    "WHERE state = 'running' AND job_type IN ('SchedulerJob', 'TriggererJob', 'DagProcessorJob') "
    "ORDER BY latest_heartbeat DESC LIMIT 200"
)
_NEWEST_JOB = (
    "SELECT id, job_type, state, latest_heartbeat, hostname FROM job "
    "WHERE job_type = {p} AND latest_heartbeat IS NOT NULL ORDER BY latest_heartbeat DESC LIMIT 1"
)
_CANARY = "SELECT MAX(end_date) FROM dag_run WHERE dag_id = {p} AND state = 'success'"
_RUNNING_TASKS = (
    "SELECT dag_id, task_id, map_index, run_id, try_number, state, hostname FROM task_instance "
    "WHERE state IN ('running', 'queued') ORDER BY start_date LIMIT 50"
)


#: PostgreSQL SQLSTATEs for "who you are is refused": invalid authorization, wrong password,
#: no SELECT grant.
_REFUSED_SQLSTATES = ("28000", "28P01", "42501")


def refused_login(exc: BaseException) -> bool:
    """Whether a driver error means the database refused the watchdog (its 401/403)."""
    if getattr(exc, "sqlstate", None) in _REFUSED_SQLSTATES:
        return True
    text = str(exc).lower()
    refusals = ("authentication failed", "no pg_hba.conf entry", "permission denied", 'role "')
    return any(refusal in text for refusal in refusals)


class DbSource:
    """Polls the ``job`` table of ``url`` (``postgresql://…`` or ``sqlite:////abs/path.db``).

    SQLAlchemy-style driver suffixes (``postgresql+psycopg2://``), as in Airflow's
    ``sql_alchemy_conn``, are accepted and ignored.
    """

    source = "db"

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        canary_dag_id: str | None = None,
        wedge: WedgeWatch | None = None,
    ) -> None:
        scheme = url.split("://", 1)[0].split("+", 1)[0].lower() if "://" in url else ""
        if scheme in ("postgresql", "postgres"):
            self.dialect = "postgresql"
            self._url = re.sub(r"^[^:]+://", "postgresql://", url)
        elif scheme == "sqlite":
            self.dialect = "sqlite"
            path = url.split("://", 1)[1]
            if not path.startswith("/") or path == "/":
                raise ConfigurationError(
                    f"--db-url {safe_db_url(url)!r}: write SQLite URLs as sqlite:////absolute/path.db"
                )
            self._url = path[1:] if path.startswith("//") else path
        else:
            raise ConfigurationError(
                f"--db-url must be postgresql://user@host:port/db or sqlite:////path/airflow.db, got "
                f"{safe_db_url(url)!r}"
            )
        self.target = safe_db_url(url)
        self.timeout = timeout
        self.canary_dag_id = canary_dag_id
        if wedge is not None and wedge.heal and self.dialect != "postgresql":
            raise ConfigurationError(
                "--heal needs a PostgreSQL metadata database (--db-url postgresql://...)"
            )
        self.wedge = wedge if self.dialect == "postgresql" else None
        #: Reads the runs of DAGs with a deadline (set by the CLI when ``[[deadlines]]`` exist).
        self.runs: RunReader | None = None

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        """A new read-only connection to the metadata DB (psycopg or sqlite3), closed on exit."""
        if self.dialect == "postgresql":
            import psycopg

            conn: Any = psycopg.connect(
                self._url,
                autocommit=True,  # one failing optional query must not abort the others
                connect_timeout=max(1, int(self.timeout)),
                options=(
                    f"-c statement_timeout={int(self.timeout * 1000)} -c default_transaction_read_only=on"
                ),
            )
        else:
            import sqlite3

            # mode=ro: a wrong path is an error, not a new empty database.
            conn = sqlite3.connect(f"file:{self._url}?mode=ro", uri=True, timeout=self.timeout)
        try:
            yield conn
        finally:
            conn.close()

    def _rows(self, conn: Any, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        placeholder = "%s" if self.dialect == "postgresql" else "?"
        cursor = conn.cursor()
        try:
            cursor.execute(sql.format(p=placeholder), tuple(params))
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def observe(self, now: datetime) -> Observation:
        """One poll; a DB that cannot be read becomes an observation with ``error`` set."""
        try:
            with self.connect() as conn:
                return self._observe(conn, now)
        except ConfigurationError:
            raise
        except Exception as exc:  # any driver error: the DB is the thing being watched
            message = self.describe_error(exc)
            blind: dict[str, str] = {}
            if refused_login(exc):
                blind["db"] = f"metadata database {self.target} refuses the watchdog: {message}"[:300]
            return Observation(
                at=now,
                source="db",
                error=f"cannot read the job table at {self.target}: {type(exc).__name__}: {message}"[:500],
                blind_spots=blind,
            )

    def describe_error(self, exc: BaseException) -> str:
        """The first line of a driver error, without the URL's password (libpq may quote it back)."""
        text = str(exc).strip()
        return mask_dsn_text(text.splitlines()[0] if text else "", self._url)

    def _record(self, row: tuple[Any, ...]) -> JobRecord:
        job_id, job_type, state, beat, hostname = row
        return JobRecord(
            COMPONENT_OF_JOB_TYPE[job_type],
            parse_timestamp(beat),
            state=state,
            job_id=int(job_id) if job_id is not None else None,
            hostname=hostname,
        )

    def _observe(self, conn: Any, now: datetime) -> Observation:
        records = [self._record(row) for row in self._rows(conn, _RUNNING_JOBS)]
        exists: dict[str, bool] = {}
        for component, job_type in JOB_TYPES.items():
            if any(r.component == component for r in records):
                exists[component] = True
                continue
            newest = self._rows(conn, _NEWEST_JOB, (job_type,))
            exists[component] = bool(newest)
            records += [self._record(row) for row in newest]
        notes: list[str] = []
        canary: dict[str, Any] = {}
        if self.canary_dag_id:
            try:
                rows = self._rows(conn, _CANARY, (self.canary_dag_id,))
                canary = {"canary_checked": True, "canary_last_success": parse_timestamp(rows[0][0])}
            except Exception as exc:
                notes.append(f"canary not checked: {type(exc).__name__}")
        running: tuple[str, ...] | None = None
        try:
            running = tuple(
                f"{dag}.{task}[{index}] run={run} try={tries} {state} on {host}"
                for dag, task, index, run, tries, state, host in self._rows(conn, _RUNNING_TASKS)
            )
        except Exception as exc:
            notes.append(f"running tasks unavailable: {type(exc).__name__}")
        idle: tuple[IdleTransaction, ...] | None = None
        if self.wedge is not None:
            try:
                idle, wedge_notes = self.wedge.inspect(conn, now)
                notes += wedge_notes
            except Exception as exc:
                notes.append(f"open transactions not checked: {type(exc).__name__}: {exc}"[:300])
        deadline_dags = None
        if self.runs is not None:
            from airflow_crashsafe.watchdog.run_fetchers import DbRunFetcher

            fetcher = DbRunFetcher(lambda sql, params: self._rows(conn, sql, params), self.dialect)
            deadline_dags = self.runs.read(fetcher, now)
        return Observation(
            at=now,
            source="db",
            deadline_dags=deadline_dags,
            jobs=tuple(records),
            exists=exists,
            running_tasks=running,
            notes=tuple(notes),
            idle_transactions=idle,
            **canary,
        )
