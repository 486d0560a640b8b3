"""The fence table: one row per (slot, target), in the database that receives the write.

A token is issued when an attempt starts work on a slot; tokens are ordered by ``(try_number,
issue order)``, which one counter per row encodes because an older try is never issued a token
once a newer try holds one. A write commits only if, under the row lock taken by the final
``UPDATE`` in the write's own transaction, its token is still the newest issued. The same row
records which attempt committed, so the committed token and attempt live with the output. See
docs/design.md, "Fencing token".
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.identity import Attempt, Slot
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.dialects import dialect_named
from airflow_crashsafe.store.mariadb_prepared import run_prepared
from airflow_crashsafe.store.mysql_engines import FENCEABLE_ENGINE, engine_refusal, is_fenceable_engine

__all__ = [
    "FENCE_ROLE",
    "FENCE_TABLE",
    "ISSUE_STATEMENT",
    "SLOT_MATCH",
    "CommittedBy",
    "FenceState",
    "Issue",
    "commit_statement",
    "commit_token",
    "commit_write",
    "create_tables",
    "fence_table_exists",
    "holds_statement",
    "is_missing_table",
    "issue_token",
    "read_fence",
    "record_rejection",
    "slot_params",
]

FENCE_TABLE = "crashsafe_fences"
_ADVISORY_LOCK_KEY = 0x63726173  # "cras": serialises concurrent first-use DDL on PostgreSQL

# One table, two dialects: only the integer and timestamp types differ.
_DDL_TEMPLATE = """
CREATE TABLE IF NOT EXISTS {table} (
    dag_id TEXT NOT NULL, task_id TEXT NOT NULL, map_index INTEGER NOT NULL,
    slot_partition TEXT NOT NULL, target TEXT NOT NULL,
    issued_token {big} NOT NULL, issued_try INTEGER NOT NULL, issued_ti_id TEXT NOT NULL,
    issued_host TEXT NOT NULL, issued_pid INTEGER NOT NULL, issued_at {stamp} NOT NULL,
    committed_token {big}, committed_try INTEGER, committed_ti_id TEXT, committed_host TEXT,
    committed_pid INTEGER, committed_clear_number INTEGER, committed_at {stamp},
    rejected_count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dag_id, task_id, map_index, slot_partition, target)
)"""
_DDL = {
    "postgresql": _DDL_TEMPLATE.format(table=FENCE_TABLE, big="BIGINT", stamp="TIMESTAMPTZ"),
    "sqlite": _DDL_TEMPLATE.format(table=FENCE_TABLE, big="INTEGER", stamp="TEXT"),
}
# MySQL/MariaDB: InnoDB keys are at most 3072 bytes, so the slot's text columns are VARCHAR(191)
# (4 bytes a character in utf8mb4); DATETIME has no implicit ON UPDATE, unlike TIMESTAMP.
MYSQL_KEY_CHARS = 191
_PORTABLE_DDL = {
    "mysql": _DDL_TEMPLATE.format(table=FENCE_TABLE, big="BIGINT", stamp="TIMESTAMP")
    .replace(
        "TEXT NOT NULL, task_id TEXT NOT NULL",
        f"VARCHAR({MYSQL_KEY_CHARS}) NOT NULL, task_id VARCHAR({MYSQL_KEY_CHARS}) NOT NULL",
    )
    .replace(
        "slot_partition TEXT NOT NULL, target TEXT NOT NULL",
        f"slot_partition VARCHAR({MYSQL_KEY_CHARS}) NOT NULL, target VARCHAR({MYSQL_KEY_CHARS}) NOT NULL",
    ),
    "duckdb": _DDL_TEMPLATE.format(table=FENCE_TABLE, big="BIGINT", stamp="TIMESTAMPTZ"),
    "snowflake": _DDL_TEMPLATE.format(table=FENCE_TABLE, big="BIGINT", stamp="TIMESTAMPTZ"),
}

SLOT_MATCH = (
    "dag_id = %(dag_id)s AND task_id = %(task_id)s AND map_index = %(map_index)s"
    " AND slot_partition = %(slot_partition)s AND target = %(target)s"
)

# Issue a token unless a newer try holds the slot or the slot is already committed in this
# clear generation (docs/design.md, "Committed means done"). No row back means "look at why".
ISSUE_STATEMENT = f"""
INSERT INTO {FENCE_TABLE} AS f (dag_id, task_id, map_index, slot_partition, target,
    issued_token, issued_try, issued_ti_id, issued_host, issued_pid, issued_at)
VALUES (%(dag_id)s, %(task_id)s, %(map_index)s, %(slot_partition)s, %(target)s,
    1, %(try_number)s, %(ti_id)s, %(hostname)s, %(pid)s, CURRENT_TIMESTAMP)
ON CONFLICT (dag_id, task_id, map_index, slot_partition, target) DO UPDATE SET
    issued_token = f.issued_token + 1, issued_try = excluded.issued_try,
    issued_ti_id = excluded.issued_ti_id, issued_host = excluded.issued_host,
    issued_pid = excluded.issued_pid, issued_at = excluded.issued_at
WHERE f.issued_try <= excluded.issued_try
  AND (f.committed_token IS NULL OR f.committed_clear_number < %(clear_number)s)
RETURNING issued_token"""

_COMMIT = f"""
UPDATE {FENCE_TABLE} SET committed_token = %(token)s, committed_try = %(try_number)s,
    committed_ti_id = %(ti_id)s, committed_host = %(hostname)s, committed_pid = %(pid)s,
    committed_clear_number = %(clear_number)s, committed_at = CURRENT_TIMESTAMP
WHERE {SLOT_MATCH} AND issued_token = %(token)s"""

_HOLDS = f"SELECT count(*) FROM {FENCE_TABLE} WHERE {SLOT_MATCH} AND issued_token = %(token)s"

_REJECT = f"UPDATE {FENCE_TABLE} SET rejected_count = rejected_count + 1 WHERE {SLOT_MATCH}"

_READ = f"""
SELECT issued_token, issued_try, issued_ti_id, committed_token, committed_try, committed_ti_id,
    committed_host, committed_pid, committed_clear_number, committed_at, rejected_count
FROM {FENCE_TABLE} WHERE {SLOT_MATCH}"""

# MySQL/MariaDB have neither ON CONFLICT ... WHERE nor RETURNING. ISSUE_STATEMENT's rule is
# spelt as ON DUPLICATE KEY UPDATE with every column set IF(<may issue>, new, old) -- issued_try
# last, since MySQL evaluates the assignments in order over the row as updated so far -- and the
# token comes back in the OK packet (``cursor.lastrowid``) through LAST_INSERT_ID(expr): 0 when
# refused. One statement, one round trip, under the row lock the upsert takes.
_MAY_ISSUE = (
    "(issued_try <= VALUES(issued_try)"
    " AND (committed_token IS NULL OR committed_clear_number < :clear_number))"
)
_MYSQL_ISSUE = f"""
INSERT INTO {FENCE_TABLE} (dag_id, task_id, map_index, slot_partition, target,
    issued_token, issued_try, issued_ti_id, issued_host, issued_pid, issued_at)
VALUES (:dag_id, :task_id, :map_index, :slot_partition, :target,
    LAST_INSERT_ID(1), :try_number, :ti_id, :hostname, :pid, CURRENT_TIMESTAMP)
ON DUPLICATE KEY UPDATE
    issued_token = IF({_MAY_ISSUE}, LAST_INSERT_ID(issued_token + 1), issued_token + LAST_INSERT_ID(0)),
    issued_ti_id = IF({_MAY_ISSUE}, VALUES(issued_ti_id), issued_ti_id),
    issued_host = IF({_MAY_ISSUE}, VALUES(issued_host), issued_host),
    issued_pid = IF({_MAY_ISSUE}, VALUES(issued_pid), issued_pid),
    issued_at = IF({_MAY_ISSUE}, VALUES(issued_at), issued_at),
    issued_try = IF({_MAY_ISSUE}, VALUES(issued_try), issued_try)"""

# MariaDB: the fence check and the write's COMMIT in one round trip (two otherwise), the COMMIT
# only when the check's UPDATE found this token still the newest; else the transaction stays open
# for the caller to roll back: each round trip saved waits for the scheduler twice less,
# milliseconds on a busy machine (docs/databases.md, "Benchmark"). Like the token's upsert, it is
# prepared from a connection's second use (store/mariadb_prepared.py).
_MARIADB_COMMIT = (
    f"BEGIN NOT ATOMIC {_COMMIT}; IF ROW_COUNT() = 1 THEN COMMIT; SELECT 1; ELSE SELECT 0; END IF; END"
)

# Snowflake has neither ON CONFLICT nor RETURNING: ISSUE_STATEMENT's rule as a MERGE, run in a
# transaction with a read of the token. The MERGE locks the fence table until that transaction
# commits, so the token read is the one it wrote; it reports 1 row when it issued, 0 when refused.
_SNOWFLAKE_ISSUE = f"""
MERGE INTO {FENCE_TABLE} AS f
USING (SELECT :dag_id AS dag_id, :task_id AS task_id, :map_index AS map_index,
    :slot_partition AS slot_partition, :target AS target, :try_number AS issued_try,
    :ti_id AS issued_ti_id, :hostname AS issued_host, :pid AS issued_pid) AS s
ON f.dag_id = s.dag_id AND f.task_id = s.task_id AND f.map_index = s.map_index
    AND f.slot_partition = s.slot_partition AND f.target = s.target
WHEN MATCHED AND f.issued_try <= s.issued_try
    AND (f.committed_token IS NULL OR f.committed_clear_number < :clear_number) THEN UPDATE SET
    issued_token = f.issued_token + 1, issued_try = s.issued_try, issued_ti_id = s.issued_ti_id,
    issued_host = s.issued_host, issued_pid = s.issued_pid, issued_at = CURRENT_TIMESTAMP
WHEN NOT MATCHED THEN INSERT (dag_id, task_id, map_index, slot_partition, target, issued_token,
    issued_try, issued_ti_id, issued_host, issued_pid, issued_at)
VALUES (s.dag_id, s.task_id, s.map_index, s.slot_partition, s.target, 1, s.issued_try,
    s.issued_ti_id, s.issued_host, s.issued_pid, CURRENT_TIMESTAMP)"""


@functools.cache
def _portable(dialect: str, statement: str) -> str:
    """One of the statements above as ``dialect`` spells it (generated with sqlglot, once)."""
    sql_dialect = dialect_named(dialect)
    if statement == "ddl":
        ddl = sql_dialect.render(_PORTABLE_DDL[dialect])
        # The fence row's lock and commit live in the write's transaction: InnoDB, whatever the
        # server's default_storage_engine (store/mysql_engines.py).
        return f"{ddl} ENGINE={FENCEABLE_ENGINE}" if dialect == "mysql" else ddl
    if dialect == "snowflake":
        return sql_dialect.render(_SNOWFLAKE_ISSUE)
    return sql_dialect.render(_MYSQL_ISSUE, read="mysql")


@dataclass(frozen=True)
class CommittedBy:
    """The attempt whose write is the slot's committed output."""

    token: int
    try_number: int
    ti_id: str
    hostname: str
    pid: int
    clear_number: int
    committed_at: str

    def describe(self) -> str:
        return (
            f"try {self.try_number} (ti {self.ti_id}, {self.hostname} pid {self.pid}) "
            f"at {self.committed_at}, token {self.token}"
        )


@dataclass(frozen=True)
class FenceState:
    """A fence row as read back: the newest token issued and what committed."""

    issued_token: int
    issued_try: int
    issued_ti_id: str
    committed: CommittedBy | None
    rejected_count: int


@dataclass(frozen=True)
class Issue:
    """The answer to "may this attempt work on the slot?"."""

    token: int | None  # set when issued
    already_committed: CommittedBy | None = None  # set when the slot is done in this generation
    newer: FenceState | None = None  # set when a newer try holds the slot

    @property
    def issued(self) -> bool:
        return self.token is not None


def slot_params(slot: Slot, target: str) -> dict[str, Any]:
    """The named parameters of :data:`SLOT_MATCH` for (slot, target)."""
    return {
        "dag_id": slot.dag_id,
        "task_id": slot.task_id,
        "map_index": slot.map_index,
        "slot_partition": slot.partition,
        "target": target,
    }


def _attempt_params(attempt: Attempt) -> dict[str, Any]:
    return {
        "try_number": attempt.try_number,
        "ti_id": attempt.ti_id,
        "hostname": attempt.hostname,
        "pid": attempt.pid,
        "clear_number": attempt.clear_number,
    }


def is_missing_table(exc: Exception) -> bool:
    """Whether a database error says a table does not exist (yet)."""
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if sqlstate == "42P01" or "no such table" in str(exc):
        return True
    if type(exc).__name__ == "ProgrammingError" and exc.args and exc.args[0] == 1146:  # MySQL
        return True
    if getattr(exc, "errno", None) == 2003 and getattr(exc, "sqlstate", None) == "42S02":  # Snowflake
        return True
    return type(exc).__name__ == "CatalogException" and "Table with name" in str(exc)  # DuckDB


def create_tables(db: Db, ddl: Sequence[str]) -> None:
    """Run crashsafe's idempotent DDL in the target; concurrent first users do not race."""
    db.begin()
    try:
        if db.dialect.is_postgres:
            db.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": _ADVISORY_LOCK_KEY})
        for statement in ddl:
            db.execute(statement)
        db.commit()
    except BaseException:
        db.rollback()
        raise


def fence_table_exists(db: Db) -> bool:
    """Whether the fence table was created here yet (it is made at the first token)."""
    if db.dialect.is_postgres:
        sql = f"SELECT to_regclass('{FENCE_TABLE}') IS NOT NULL"
    elif db.dialect.name == "sqlite":
        sql = f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{FENCE_TABLE}'"
    elif db.dialect.is_snowflake:  # an unquoted name is stored in upper case
        sql = (
            f"SELECT count(*) FROM information_schema.tables WHERE table_name = '{FENCE_TABLE.upper()}' "
            "AND table_schema = CURRENT_SCHEMA()"
        )
    else:
        schema = "DATABASE()" if db.dialect.is_mysql else "current_schema()"
        sql = (
            f"SELECT count(*) FROM information_schema.tables WHERE table_name = '{FENCE_TABLE}' "
            f"AND table_schema = {schema}"
        )
    return bool(db.execute(sql).fetchone()[0])


def ensure_fence_table(db: Db) -> None:
    """Create the fence table if needed; on MySQL/MariaDB refuse one that is not InnoDB.

    ``ENGINE=InnoDB`` is part of its DDL, but a server without NO_ENGINE_SUBSTITUTION makes the
    table on its default engine when InnoDB is unavailable, and an older table may be on another.
    """
    name = db.dialect.name
    create_tables(db, [_DDL[name] if name in _DDL else _portable(name, "ddl")])
    if db.dialect.is_mysql:
        with db.autocommit():
            row = db.execute(_MYSQL_FENCE_ENGINE, {"table": FENCE_TABLE}).fetchone()
        if row is not None and not is_fenceable_engine(row[1]):
            raise engine_refusal(db, str(row[0]), FENCE_TABLE, FENCE_ROLE, row[1], fence=True)


#: What the fence table is to a write, in a refusal's message.
FENCE_ROLE = "crashsafe's fence table, where every fenced write to this database is checked"
_MYSQL_FENCE_ENGINE = (
    "SELECT TABLE_SCHEMA, ENGINE FROM information_schema.TABLES "
    "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %(table)s"
)


def issue_token(db: Db, slot: Slot, target: str, attempt: Attempt) -> Issue:
    """Issue the next token for (slot, target) to ``attempt``, in a transaction of its own."""
    params = slot_params(slot, target) | _attempt_params(attempt)
    issue = _issue_row_locked if db.dialect.is_mysql else _issue_row
    if db.dialect.is_snowflake:
        issue = _issue_row_merged
    try:
        # One statement, one round trip: the token is visible to every other attempt at once.
        row = issue(db, params)
    except Exception as exc:
        if not is_missing_table(exc):
            raise
        db.rollback()
        ensure_fence_table(db)
        row = issue(db, params)
    # No row issued: a newer try holds the slot, or it is committed. Reading why is a second
    # statement; if the row moved on in between, the attempt is refused all the same.
    if row is not None:
        return Issue(token=int(row[0]))
    with db.autocommit():
        state = read_fence(db, slot, target)
    assert state is not None  # no row issued means the row exists
    if state.committed is not None and state.issued_try <= attempt.try_number:
        return Issue(token=None, already_committed=state.committed)
    return Issue(token=None, newer=state)


def _issue_row(db: Db, params: dict[str, Any]) -> Any:
    """PostgreSQL, SQLite, DuckDB: ``ISSUE_STATEMENT`` alone, one round trip."""
    return db.execute_alone(ISSUE_STATEMENT, params).fetchone()


def _issue_row_locked(db: Db, params: dict[str, Any]) -> Any:
    """MySQL/MariaDB: ``_MYSQL_ISSUE`` in autocommit; (token,) or None when refused."""
    too_long = [
        k for k in ("dag_id", "task_id", "slot_partition", "target") if len(str(params[k])) > MYSQL_KEY_CHARS
    ]
    if too_long:
        raise ConfigurationError(
            f"The fence key {', '.join(f'{k}={params[k]!r}' for k in too_long)} is longer than "
            f"{MYSQL_KEY_CHARS} characters, the most a MySQL/MariaDB fence row can key on; shorten "
            "it (slot_partition= or the target name)."
        )
    # Autocommit is off on target connections: the upsert opens a transaction, COMMIT ends it
    # (switching autocommit on and off around it cost a statement more). Through mysqlclient both
    # go in one round trip; a COMMIT after a failed upsert does not run.
    issue = _portable(db.dialect.name, "issue")
    try:
        if db.compound_statements:  # MariaDB through mysqlclient, which also takes literals in USING
            token, _ = run_prepared(db, issue, "COMMIT", params, db.execute_all)
        elif db.multi_statements:
            token, _ = db.execute_all(f"{issue}; COMMIT", params)
        else:
            token = int(db.execute(issue, params).lastrowid or 0)
            db.commit()
    except BaseException:
        db.rollback()
        raise
    return (token,) if token else None


def _issue_row_merged(db: Db, params: dict[str, Any]) -> Any:
    """Snowflake: ``_SNOWFLAKE_ISSUE`` and the token's read in one transaction; (token,) or None."""
    db.begin()
    try:
        merged = int(db.execute(_portable("snowflake", "issue"), params).rowcount or 0)
        row = db.execute(f"SELECT issued_token FROM {FENCE_TABLE} WHERE {SLOT_MATCH}", params).fetchone()
        db.commit()
    except BaseException:
        db.rollback()
        raise
    return (int(row[0]),) if merged == 1 and row is not None else None


def commit_statement(slot: Slot, target: str, attempt: Attempt, token: int) -> tuple[str, dict[str, Any]]:
    """The fence-commit UPDATE and its parameters, for callers that fold it into a larger statement."""
    return _COMMIT, slot_params(slot, target) | _attempt_params(attempt) | {"token": token}


def holds_statement(slot: Slot, target: str, token: int) -> tuple[str, dict[str, Any]]:
    """A count that is 1 while ``token`` is still the newest issued, for a unit's start check."""
    return _HOLDS, slot_params(slot, target) | {"token": token}


def commit_token(db: Db, slot: Slot, target: str, attempt: Attempt, token: int) -> bool:
    """Inside the write's open transaction: lock the fence row and record the commit.

    True when ``token`` is still the newest issued (the caller then commits); False when a newer
    attempt holds the slot (the caller must roll back).
    """
    params = slot_params(slot, target) | _attempt_params(attempt) | {"token": token}
    if db.dialect.is_duckdb:  # its cursor has no rowcount: the UPDATE returns the count
        return int(db.execute(_COMMIT, params).fetchone()[0]) == 1
    return int(db.execute(_COMMIT, params).rowcount) == 1


def commit_write(db: Db, slot: Slot, target: str, attempt: Attempt, token: int) -> bool:
    """End the write's open transaction: :func:`commit_token`, then COMMIT if the token held.

    True when committed; False when a newer attempt holds the slot, the transaction still open
    (the caller must roll back).
    """
    if db.compound_statements:
        params = slot_params(slot, target) | _attempt_params(attempt) | {"token": token}
        return run_prepared(db, _MARIADB_COMMIT, "", params, lambda sql, p, _: db.commit_by(sql, p))
    if not commit_token(db, slot, target, attempt, token):
        return False
    db.commit()
    return True


def record_rejection(db: Db, slot: Slot, target: str) -> None:
    """Count a rejected stale write on the fence row, in a transaction of its own."""

    db.begin()
    try:
        db.execute(_REJECT, slot_params(slot, target))
        db.commit()
    except BaseException:
        db.rollback()
        raise


def read_fence(db: Db, slot: Slot, target: str) -> FenceState | None:
    """The fence row for (slot, target), or None before any attempt started work on it."""
    row = db.execute(_READ, slot_params(slot, target)).fetchone()
    if row is None:
        return None
    committed = None
    if row[3] is not None:
        committed = CommittedBy(
            token=int(row[3]),
            try_number=int(row[4]),
            ti_id=str(row[5]),
            hostname=str(row[6]),
            pid=int(row[7]),
            clear_number=int(row[8]),
            committed_at=str(row[9]),
        )
    return FenceState(
        issued_token=int(row[0]),
        issued_try=int(row[1]),
        issued_ti_id=str(row[2]),
        committed=committed,
        rejected_count=int(row[10]),
    )
