"""The crashsafe store's versioned schema and its migration.

Migrations are numbered and append-only; ``crashsafe_schema_version`` records each one applied.
Many workers may start at once on a fresh store, so migration runs under a lock
(``pg_advisory_xact_lock`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite) and re-reads the version
after taking it: the first worker migrates, the others find the work done.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_crashsafe.errors import StoreError
from airflow_crashsafe.store import admission, scans
from airflow_crashsafe.store.dbapi import Db

__all__ = ["MIGRATIONS", "Migration", "current_version", "latest_version", "migrate"]

_MIGRATION_LOCK_KEY = 0x63736D67  # "csmg"
VERSION_TABLE = "crashsafe_schema_version"


@dataclass(frozen=True)
class Migration:
    """One schema step, written once per dialect."""

    version: int
    description: str
    postgresql: tuple[str, ...]
    sqlite: tuple[str, ...]

    def statements(self, dialect: str) -> tuple[str, ...]:
        return self.postgresql if dialect == "postgresql" else self.sqlite


_EVENT_COLUMNS = """
    kind TEXT NOT NULL,
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL,
    slot_partition TEXT NOT NULL, target TEXT NOT NULL,
    run_id TEXT, try_number INTEGER, ti_id TEXT, clear_number INTEGER,
    hostname TEXT, pid INTEGER, token BIGINT, detail TEXT NOT NULL DEFAULT '{}'"""

_LEDGER_COLUMNS = """
    idem_key TEXT PRIMARY KEY,
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL,
    slot_partition TEXT NOT NULL, target TEXT NOT NULL, version INTEGER NOT NULL,
    fingerprint TEXT NOT NULL, request TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL, send_count INTEGER NOT NULL DEFAULT 0, replay_count INTEGER NOT NULL DEFAULT 0,
    run_id TEXT, try_number INTEGER, ti_id TEXT, hostname TEXT, pid INTEGER, token BIGINT,
    response_status INTEGER, result TEXT, error TEXT"""


def _attempts_ddl(stamp: str, now: str) -> str:
    # One row per execution: a try run by one process (hostname, pid), so a broker redelivery of
    # the same try is two rows. hostname '' / pid 0 marks a try whose process is not known yet.
    return f"""CREATE TABLE crashsafe_attempts (
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL, run_id TEXT NOT NULL,
    try_number INTEGER NOT NULL, hostname TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0,
    slot_partition TEXT NOT NULL DEFAULT '', ti_id TEXT, clear_number INTEGER,
    started_at {stamp}, start_source TEXT, ended_at {stamp}, end_source TEXT,
    state TEXT, state_source TEXT, reported_state TEXT, last_seen_at {stamp},
    replay_safe INTEGER, operator TEXT, updated_at {stamp} NOT NULL DEFAULT {now},
    PRIMARY KEY (dag_id, task_id, map_index, run_id, try_number, hostname, pid))"""


_ATTEMPT_INDEXES = (
    "CREATE INDEX crashsafe_attempts_slot ON crashsafe_attempts (dag_id, task_id, map_index, slot_partition)",
    "CREATE INDEX crashsafe_attempts_updated ON crashsafe_attempts (updated_at)",
)


def _audit_alerts_ddl(stamp: str, now: str) -> str:
    return f"""CREATE TABLE crashsafe_audit_alerts (
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL,
    slot_partition TEXT NOT NULL, risk TEXT NOT NULL, summary TEXT NOT NULL,
    alerted_at {stamp} NOT NULL DEFAULT {now},
    PRIMARY KEY (dag_id, task_id, map_index, slot_partition))"""


def _digest_ddl(stamp: str, real: str) -> tuple[str, ...]:
    # The duplicate digest (store.duplicates, kept by audit.digest): one row per slot that executed
    # more than once, kept current from the task instances whose records changed
    # (crashsafe_audit_dirty, store.dirty; gen grows on every change, so a refresh deletes only the
    # marks it has seen).
    return (
        """CREATE TABLE crashsafe_audit_dirty (
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL, run_id TEXT NOT NULL,
    gen INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (dag_id, task_id, map_index, run_id))""",
        "INSERT INTO crashsafe_audit_dirty (dag_id, task_id, map_index, run_id) "
        "SELECT DISTINCT dag_id, task_id, map_index, run_id FROM crashsafe_attempts",
        f"""CREATE TABLE crashsafe_duplicates (
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL, slot_partition TEXT NOT NULL,
    risk TEXT NOT NULL, risk_rank INTEGER NOT NULL, kinds TEXT NOT NULL, overlap_seconds {real} NOT NULL,
    protection TEXT NOT NULL, runs INTEGER NOT NULL, first_started_at {stamp} NOT NULL,
    last_active_at {stamp} NOT NULL, report TEXT NOT NULL,
    PRIMARY KEY (dag_id, task_id, map_index, slot_partition))""",
        "CREATE INDEX crashsafe_duplicates_rank ON crashsafe_duplicates (risk_rank, first_started_at)",
        "CREATE INDEX crashsafe_duplicates_active ON crashsafe_duplicates (last_active_at)",
    )


_BOUNDED_UI_INDEXES = (
    # The fences page and overview: kind and DAG filters, newest first, counted (store/events.py).
    "CREATE INDEX IF NOT EXISTS crashsafe_events_kind ON crashsafe_events (kind, dag_id, id)",
    # The ledger page: DAG and state filters, newest intent first, counted (store/ledger.py).
    "CREATE INDEX IF NOT EXISTS crashsafe_ledger_dag_intent ON crashsafe_ledger (dag_id, intent_at)",
    "CREATE INDEX IF NOT EXISTS crashsafe_ledger_state ON crashsafe_ledger (state, dag_id, intent_at)",
    # Retention (store/retention.py): old events, old finished attempts.
    "CREATE INDEX IF NOT EXISTS crashsafe_attempts_dag_updated ON crashsafe_attempts (dag_id, updated_at)",
)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        version=1,
        description="events: what crashsafe's fenced writes did (committed, fenced out, skipped)",
        postgresql=(
            f"""CREATE TABLE crashsafe_events (
    id BIGSERIAL PRIMARY KEY,{_EVENT_COLUMNS},
    created_at TIMESTAMPTZ NOT NULL DEFAULT now())""",
            "CREATE INDEX crashsafe_events_slot ON crashsafe_events "
            "(dag_id, task_id, map_index, slot_partition)",
            "CREATE INDEX crashsafe_events_created ON crashsafe_events (created_at)",
        ),
        sqlite=(
            f"""CREATE TABLE crashsafe_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,{_EVENT_COLUMNS},
    created_at TEXT NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')))""",
            "CREATE INDEX crashsafe_events_slot ON crashsafe_events "
            "(dag_id, task_id, map_index, slot_partition)",
            "CREATE INDEX crashsafe_events_created ON crashsafe_events (created_at)",
        ),
    ),
    Migration(
        version=2,
        description="ledger: idempotency keys of external calls, intent before send, outcome after",
        postgresql=(
            f"""CREATE TABLE crashsafe_ledger ({_LEDGER_COLUMNS},
    intent_at TIMESTAMPTZ NOT NULL DEFAULT now(), outcome_at TIMESTAMPTZ)""",
            "CREATE INDEX crashsafe_ledger_slot ON crashsafe_ledger (dag_id, task_id, slot_partition)",
            "CREATE INDEX crashsafe_ledger_intent ON crashsafe_ledger (intent_at)",
        ),
        sqlite=(
            f"""CREATE TABLE crashsafe_ledger ({_LEDGER_COLUMNS},
    intent_at TEXT NOT NULL DEFAULT (strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')), outcome_at TEXT)""",
            "CREATE INDEX crashsafe_ledger_slot ON crashsafe_ledger (dag_id, task_id, slot_partition)",
            "CREATE INDEX crashsafe_ledger_intent ON crashsafe_ledger (intent_at)",
        ),
    ),
    Migration(
        version=3,
        description="attempts: each execution of a slot (audit), and the risky duplicates alerted",
        postgresql=(
            _attempts_ddl("TIMESTAMPTZ", "now()"),
            *_ATTEMPT_INDEXES,
            _audit_alerts_ddl("TIMESTAMPTZ", "now()"),
        ),
        sqlite=(
            _attempts_ddl("TEXT", "(strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now'))"),
            *_ATTEMPT_INDEXES,
            _audit_alerts_ddl("TEXT", "(strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now'))"),
        ),
    ),
    Migration(
        version=4,
        description="attempts: when the task process got SIGTERM (a stale attempt told to stop)",
        postgresql=("ALTER TABLE crashsafe_attempts ADD COLUMN terminated_at TIMESTAMPTZ",),
        sqlite=("ALTER TABLE crashsafe_attempts ADD COLUMN terminated_at TEXT",),
    ),
    Migration(
        version=5,
        description="duplicate digest: each duplicated slot classified once, kept current incrementally",
        postgresql=_digest_ddl("TIMESTAMPTZ", "DOUBLE PRECISION"),
        sqlite=_digest_ddl("TEXT", "REAL"),
    ),
    Migration(
        version=6,
        description="indexes that keep every UI list and retention bounded (filtered, counted, limited)",
        postgresql=_BOUNDED_UI_INDEXES,
        sqlite=_BOUNDED_UI_INDEXES,
    ),
    Migration(
        version=7,
        description="admission: recovery re-runs waiting for and holding a place per resource",
        postgresql=admission.ddl("postgresql"),
        sqlite=admission.ddl("sqlite"),
    ),
    Migration(
        version=8,
        description="scan results: each task's latest verdict from airflow-crashsafe scan --record",
        postgresql=scans.ddl("postgresql"),
        sqlite=scans.ddl("sqlite"),
    ),
    Migration(
        version=9,
        description="attempts: whether the task process resumed its try after a deferral or reschedule",
        postgresql=("ALTER TABLE crashsafe_attempts ADD COLUMN resumed INTEGER",),
        sqlite=("ALTER TABLE crashsafe_attempts ADD COLUMN resumed INTEGER",),
    ),
)


def latest_version() -> int:
    return MIGRATIONS[-1].version


def _create_version_table(db: Db) -> None:
    applied_at = (
        "TIMESTAMPTZ NOT NULL DEFAULT now()"
        if db.dialect.is_postgres
        else ("TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP")
    )
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
        f"(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at {applied_at})"
    )


def current_version(db: Db) -> int:
    """The highest applied migration, 0 for an empty store. Runs inside the caller's transaction."""
    try:
        row = db.execute(f"SELECT max(version) FROM {VERSION_TABLE}").fetchone()
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == "42P01" or "no such table" in str(exc):
            return 0
        raise
    return int(row[0] or 0)


def _peek_version(db: Db) -> int:
    db.begin()
    try:
        return current_version(db)
    finally:
        db.rollback()


def migrate(db: Db) -> int:
    """Bring the store to the latest schema version and return it."""
    if _peek_version(db) == latest_version():
        return latest_version()
    db.begin()
    try:
        if db.dialect.is_postgres:
            db.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": _MIGRATION_LOCK_KEY})
        _create_version_table(db)
        version = current_version(db)
        if version > latest_version():
            raise StoreError(
                f"The crashsafe store is at schema version {version}, newer than this package "
                f"knows ({latest_version()}); upgrade airflow-crashsafe on this machine."
            )
        for migration in MIGRATIONS:
            if migration.version <= version:
                continue
            for statement in migration.statements(db.dialect.name):
                db.execute(statement)
            db.execute(
                f"INSERT INTO {VERSION_TABLE} (version, description) VALUES (%(v)s, %(d)s)",
                {"v": migration.version, "d": migration.description},
            )
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return latest_version()
