"""The write plans' statements on MySQL/MariaDB and DuckDB, in the client-driven fenced transaction.

What differs from SQLite, and why:

- **partition check**: neither database has ``INSERT ... RETURNING`` usable here (MariaDB's cannot
  return an expression over the inserted row's partition, MySQL has none), so the overwrite
  counts the partition after its INSERT: rows inserted minus rows now in the partition are the
  rows that landed outside it, and any such row rolls everything back;
- **upsert**: MySQL/MariaDB have no MERGE and no ``ON CONFLICT``: ``INSERT ... ON DUPLICATE KEY
  UPDATE c = VALUES(c)``, which rewrites only rows whose values differ. It fires on *any* unique
  key, so another unique key the source fills is refused (a conflict on it would update the row of
  another natural key). Its affected-rows count is 1 per insert and 2 per changed row, so the rows
  written are derived from it and the count of source keys already present. DuckDB takes the same
  ``ON CONFLICT (key) DO UPDATE ... WHERE <differs>`` as SQLite;
- **refusals in the dialect**: a MySQL/MariaDB statement list holding DDL is refused (DDL commits
  the open transaction implicitly, before the fence check); a MERGE source is also checked for the
  dialect's own non-deterministic functions (``RAND()``, ``UUID()``, ``SYSDATE()``, ``today()``, ...),
  parsed with sqlglot in the target's dialect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow_crashsafe.errors import ConfigurationError, NaturalKeyNotUniqueError
from airflow_crashsafe.sql import statements
from airflow_crashsafe.sql.introspect import TableInfo
from airflow_crashsafe.sql.plans import OpenTransaction
from airflow_crashsafe.store.dbapi import Db
from airflow_crashsafe.store.dialects import dialect_named

__all__ = [
    "PORTABLE",
    "changed_rows",
    "dialect_nondeterministic_calls",
    "merge",
    "overwrite",
    "refuse_implicit_commits",
]

#: The dialects whose plans run here.
PORTABLE = ("mysql", "duckdb", "snowflake")
_TEMP = "crashsafe_merge_src"

# Functions returning something new per call, beyond the ones every dialect shares (now(), ...).
_NONDETERMINISTIC = {
    "mysql": {
        "rand", "uuid", "uuid_short", "sysdate", "curdate", "curtime", "utc_timestamp", "utc_date",
        "utc_time", "unix_timestamp", "connection_id", "last_insert_id", "current_timestamp",
        "current_date", "current_time", "localtimestamp", "localtime", "now", "random",
    },
    "duckdb": {
        "uuid", "gen_random_uuid", "random", "today", "get_current_timestamp", "get_current_time",
        "current_localtimestamp", "current_localtime", "nextval", "currval", "now",
        "current_timestamp", "current_date", "current_time", "transaction_timestamp",
    },
    "snowflake": {
        "random", "uuid", "uuid_string", "randstr", "uniform", "normal", "zipf",
        "seq1", "seq2", "seq4", "seq8",
        "current_timestamp", "current_date", "current_time", "localtimestamp", "localtime",
        "sysdate", "systimestamp", "getdate", "now", "current_session", "current_statement",
        "current_transaction", "last_query_id",
    },
}  # fmt: skip
# Statements that commit the open MySQL transaction implicitly (TEMPORARY tables excepted).
_IMPLICIT_COMMIT = {"CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME", "GRANT", "REVOKE", "LOCK", "UNLOCK"}
_TRANSACTION_CONTROL = {"BEGIN", "START", "COMMIT", "ROLLBACK"}


def changed_rows(db: Db, cursor: Any) -> int:
    """Rows the last statement changed (DuckDB returns them as a DML statement's result)."""
    if db.dialect.is_duckdb:
        if cursor.description is None or [d[0] for d in cursor.description] != ["Count"]:
            return 0
        row = cursor.fetchone()
        return int(row[0]) if row else 0
    return max(int(cursor.rowcount), 0)


def overwrite(
    tx: OpenTransaction,
    qtable: str,
    qcols: Sequence[str],
    sql: str,
    parameters: Any,
    predicate: Callable[[statements.Binder], str],
) -> tuple[int, int, int]:
    """DELETE the partition, INSERT the source, count the partition: (inserted, deleted, outside)."""
    db, cur, name = tx.db, tx.cursor, tx.db.dialect.name
    delete = statements.Binder(name, None)
    cur.execute(statements.delete_partition(qtable, predicate(delete)), delete.params())
    deleted = changed_rows(db, cur)
    binder = statements.Binder(name, parameters)
    cols = ", ".join(qcols)
    source = binder.source(sql)
    cur.execute(
        f"INSERT INTO {qtable} ({cols})\nSELECT {cols} FROM (\n{source}\n) AS {statements.SOURCE_ALIAS}",
        binder.params(),
    )
    inserted = changed_rows(db, cur)
    count = statements.Binder(name, None)
    cur.execute(f"SELECT count(*) FROM {qtable} WHERE {predicate(count)}", count.params())
    inside = int(cur.fetchone()[0])
    return inserted, deleted, inserted - inside


def _other_unique_keys(info: TableInfo, key: Sequence[str], columns: Sequence[str]) -> list[str]:
    """Unique keys besides the natural key that the source's columns fill (MySQL's upsert fires on them)."""
    wanted, given = set(key), set(columns)
    return [
        f"{u.name} {list(u.columns)}"
        for u in info.unique_keys
        if set(u.columns) != wanted and u.columns and set(u.columns) <= given
    ]


def merge(
    tx: OpenTransaction,
    info: TableInfo,
    key: Sequence[str],
    columns: Sequence[str],
    quoted: tuple[str, list[str], list[str], list[str]],
    sql: str,
    parameters: Any,
    check_keys: Callable[[int, list[Any]], None],
) -> dict[str, Any]:
    """Materialize the source, check its keys, upsert it; ``{"rows", "source_rows"}``."""
    db, cur = tx.db, tx.cursor
    qtable, qcols, qkey, qupdate = quoted
    if db.dialect.is_snowflake:
        return _snowflake_merge(tx, quoted, sql, parameters, check_keys)
    mysql = db.dialect.is_mysql
    other = _other_unique_keys(info, key, columns) if mysql else []
    if other:
        raise NaturalKeyNotUniqueError(
            f"{info.name} has unique key(s) {', '.join(other)} besides the natural key {list(key)}, "
            "and the source fills them: MySQL's INSERT ... ON DUPLICATE KEY UPDATE would update the "
            "row of another natural key on a conflict there. Leave those columns out of the source "
            "or make the natural key that index."
        )
    temp = dialect_named(db.dialect.name).ident(_TEMP)
    cur.execute(f"DROP {'TEMPORARY ' if mysql else ''}TABLE IF EXISTS {temp}")
    binder = statements.Binder(db.dialect.name, parameters)
    cur.execute(statements.materialize_source(binder, temp, sql), binder.params())
    nulls_sql, dupes_sql = statements.source_key_problems(temp, qkey)
    cur.execute(nulls_sql)
    null_rows = int(cur.fetchone()[0])
    cur.execute(dupes_sql)
    check_keys(null_rows, cur.fetchall())
    cur.execute(f"SELECT count(*) FROM {temp}")
    source_rows = int(cur.fetchone()[0])
    if not mysql:
        cur.execute(statements.upsert("duckdb", qtable, temp, qcols, qkey, qupdate))
        rows = changed_rows(db, cur)
    else:
        s, t = statements.SOURCE_ALIAS, statements.TARGET_ALIAS
        on = " AND ".join(f"{t}.{k} = {s}.{k}" for k in qkey)
        cur.execute(f"SELECT count(*) FROM {temp} AS {s} JOIN {qtable} AS {t} ON {on}")
        present = int(cur.fetchone()[0])
        sets = ", ".join(f"{c} = VALUES({c})" for c in qupdate) or f"{qkey[0]} = {qkey[0]}"
        cols = ", ".join(qcols)
        cur.execute(
            f"INSERT INTO {qtable} ({cols})\nSELECT {cols} FROM {temp} AS {s}\nON DUPLICATE KEY UPDATE {sets}"
        )
        inserted = source_rows - present
        rows = inserted + (changed_rows(db, cur) - inserted) // 2  # 1 per insert, 2 per changed row
    cur.execute(f"DROP {'TEMPORARY ' if mysql else ''}TABLE {temp}")
    return {"rows": rows, "source_rows": source_rows}


def _snowflake_merge(
    tx: OpenTransaction,
    quoted: tuple[str, list[str], list[str], list[str]],
    sql: str,
    parameters: Any,
    check_keys: Callable[[int, list[Any]], None],
) -> dict[str, Any]:
    """Snowflake: check the source's keys, then MERGE it; the source runs twice.

    A temporary table would be DDL, which commits the open transaction on Snowflake (before the
    fence check), so the source is not materialized: one query checks its keys and counts it,
    then the MERGE reads it again. Non-deterministic sources are refused before, so both runs see
    the same rows; a MERGE updates only rows whose values differ (a re-run writes 0 rows).
    """
    cur, name = tx.cursor, tx.db.dialect.name
    qtable, qcols, qkey, qupdate = quoted
    check = statements.Binder(name, parameters)
    inline = f"(\n{check.source(sql)}\n) AS {statements.SOURCE_ALIAS}"
    nulls_sql, dupes_sql = statements.source_key_problems(inline, qkey)
    cur.execute(nulls_sql, check.params())
    null_rows = int(cur.fetchone()[0])
    cur.execute(dupes_sql, check.params())
    check_keys(null_rows, cur.fetchall())
    cur.execute(f"SELECT count(*) FROM {inline}", check.params())
    source_rows = int(cur.fetchone()[0])
    binder = statements.Binder(name, parameters)
    source = f"(\n{binder.source(sql)}\n)"
    cur.execute(statements.merge(qtable, source, qcols, qkey, qupdate), binder.params())
    return {"rows": changed_rows(tx.db, cur), "source_rows": source_rows}


def dialect_nondeterministic_calls(dialect: str, sql: str) -> list[str]:
    """The dialect's own non-deterministic calls in ``sql``, parsed with sqlglot ([] if unparsable)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    names = _NONDETERMINISTIC.get(dialect, set())
    try:
        trees = sqlglot.parse(statements.strip_statement(sql), read=dialect_named(dialect).sqlglot)
    except SqlglotError:
        return []
    found: list[str] = []
    for tree in trees:
        for node in tree.walk() if tree is not None else ():
            if not isinstance(node, exp.Func):
                continue
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if isinstance(node, exp.Rand):
                name = "rand" if dialect == "mysql" else "random"
            if name in names and not (name == "unix_timestamp" and node.args.get("this") is not None):
                found.append(f"{name}()")
    return list(dict.fromkeys(found))


def refuse_implicit_commits(dialect: str, stmts: Sequence[str], task_id: str) -> None:
    """MySQL/MariaDB, Snowflake: refuse a statement that would commit (or end) the fenced transaction
    early. Snowflake commits before any DDL, a temporary table's too."""
    if dialect not in ("mysql", "snowflake"):
        return
    from sqlglot.tokens import Tokenizer

    for i, stmt in enumerate(stmts, start=1):
        words = [t.text.upper() for t in Tokenizer().tokenize(stmt)[:3]]
        first = words[0] if words else ""
        temporary = len(words) > 1 and words[1] == "TEMPORARY" and dialect == "mysql"
        if (first in _IMPLICIT_COMMIT and not temporary) or first in _TRANSACTION_CONTROL:
            raise ConfigurationError(
                f"Statement {i} of {task_id!r} starts with {first}: on {dialect_named(dialect).product} "
                "it commits or ends "
                "the fenced transaction before the fence check, so a stale attempt's write could "
                "commit. Run DDL outside the fenced write (a separate task, or CREATE TEMPORARY TABLE)."
            )
