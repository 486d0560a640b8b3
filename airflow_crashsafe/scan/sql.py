"""Classify SQL by what running it twice does, parsed with sqlglot (docs/scan.md, "SQL").

Every statement of the text is parsed in the connection's dialect; placeholders (``%(name)s``,
``%s``) become string markers first, so a parameter's value can still tell whether a ``DELETE``
is scoped to the run. What decides:

- reads, ``CREATE ... IF NOT EXISTS`` / ``OR REPLACE``, DDL that fails when repeated, a plain
  ``DELETE``, an assignment ``UPDATE``: safe;
- ``INSERT`` with ``ON CONFLICT`` / ``ON DUPLICATE KEY`` / ``IGNORE`` / ``OVERWRITE`` and a
  ``MERGE``, on a natural key: safe; a generated key or adding to a column: risky (:mod:`.sql_keys`);
- renames and swaps that move the live table away before bringing another in: risky
  (:mod:`.sql_swaps`);
- ``DELETE`` (or ``TRUNCATE``) then ``INSERT`` into the same table: safe in one transaction and
  scoped to the run (or a whole-table truncate), risky otherwise;
- any other ``INSERT``, ``COPY ... FROM`` a file: risky (an append);
- ``CALL``/``EXEC``, a ``DO`` block, text the parser cannot read: unknown.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from airflow_crashsafe.scan.model import Finding, Reason
from airflow_crashsafe.scan.sql_keys import (
    increments,
    insert_finding,
    inserts_missing_only,
    merge_finding,
    target_names,
)
from airflow_crashsafe.scan.sql_swaps import TRANSACTIONAL_DDL, Moves, alter_finding, command_moves

__all__ = ["PARAM_MARK", "SqlFacts", "classify_sql", "dialect_of", "mark_placeholders"]

#: A placeholder becomes this string literal, suffixed by its name (``%s``: by its position).
PARAM_MARK = "__crashsafe_param_"

#: Airflow connection type -> sqlglot dialect.
_DIALECTS = {
    "postgres": "postgres",
    "postgresql": "postgres",
    "mysql": "mysql",
    "snowflake": "snowflake",
    "google_cloud_platform": "bigquery",
    "gcpbigquery": "bigquery",
    "bigquery": "bigquery",
    "redshift": "redshift",
    "mssql": "tsql",
    "oracle": "oracle",
    "sqlite": "sqlite",
    "trino": "trino",
    "presto": "presto",
    "databricks": "databricks",
    "hive_cli": "hive",
    "hiveserver2": "hive",
    "duckdb": "duckdb",
    "teradata": "teradata",
}
_NAMED = re.compile(r"%\((\w+)\)s")
_SAFE_COMMANDS = {
    "SET",
    "USE",
    "SHOW",
    "EXPLAIN",
    "ANALYZE",
    "VACUUM",
    "GRANT",
    "REVOKE",
    "REFRESH",
    "COMMENT",
}
_OPAQUE_COMMANDS = {"CALL", "EXEC", "EXECUTE", "DO"}


def dialect_of(conn_type: str | None) -> str | None:
    """sqlglot's dialect for an Airflow connection type; None: sqlglot's generic SQL."""
    return _DIALECTS.get((conn_type or "").lower())


def mark_placeholders(sql: str) -> str:
    """``sql`` with DB-API placeholders as string markers (``%%`` kept as ``%``)."""
    text = _NAMED.sub(lambda m: f"'{PARAM_MARK}{m.group(1)}'", sql)
    position = iter(range(10_000))
    text = re.sub(r"%s\b", lambda _m: f"'{PARAM_MARK}{next(position)}'", text)
    return text.replace("%%", "%")


@dataclass
class SqlFacts:
    """What the rest of a task needs from its SQL besides the verdict: the tables it writes."""

    written: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    #: Temporary tables created so far, and tables cleared (table -> scoped to the run, or whole).
    temp: set[str] = field(default_factory=set)
    cleared: dict[str, bool] = field(default_factory=dict)
    #: Tables this task builds, drops and renames (:mod:`.sql_swaps`).
    moves: Moves = field(default_factory=Moves)
    dialect: str | None = None
    prepared: set[str] = field(default_factory=set)
    #: Tables read so far (a Python insert guarded by a read of its own target inserts only what is missing).
    read: list[str] = field(default_factory=list)


def _brief(stmt: exp.Expression) -> str:
    """``INSERT mart.t``: enough to find a safe statement, without regenerating its SQL (costly)."""
    target = stmt.args.get("this")
    table = _table(target) if isinstance(target, exp.Expression) else ""
    return f"{stmt.key.upper()} {table if table != '?' else ''}".strip()


def _short(node: exp.Expression | str, limit: int = 160) -> str:
    """The statement itself, for a finding a reader must act on."""
    text = node if isinstance(node, str) else node.sql()
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _name(table: exp.Table) -> str:
    """``db.schema.table`` without alias or quotes."""
    return ".".join(p for p in (table.catalog, table.db, table.name) if p)


def _table(node: exp.Expression | None) -> str:
    table = node.find(exp.Table) if node is not None else None
    return _name(table) if table is not None else "?"


def _is_scoped(where: exp.Expression | None, markers: Collection[str]) -> bool:
    """True when the condition compares against a value of this run (a date, the run id, a param)."""
    if where is None:
        return False
    return any(lit.is_string and any(m in lit.this for m in markers) for lit in where.find_all(exp.Literal))


def _command_finding(stmt: exp.Command, text: str, facts: SqlFacts) -> Finding:
    word = str(stmt.this).upper()
    moved = command_moves(text, facts.moves, atomic=False)
    if moved is not None:
        return moved
    if word == "REPLACE":
        return Finding(
            "safe", "natural_key_merge", [Reason("REPLACE INTO replaces rows by key", _short(text))]
        )
    if word in _SAFE_COMMANDS:
        return Finding("safe", "read_only", [Reason(f"{word} changes no data twice", _short(text))])
    if word in _OPAQUE_COMMANDS:
        return Finding(
            "unknown",
            "procedure_call",
            [Reason(f"{word}: what the procedure writes is not in the task", _short(text))],
            "read the procedure; if it is safe, replay_safe(task, reason=...), else FencedSQLOperator",
        )
    return Finding(
        "unknown", "unparsed_sql", [Reason(f"{word}: a statement the scan cannot classify", _short(text))]
    )


_IDEMPOTENT_DDL = re.compile(
    r"^\s*CREATE\s+(OR\s+REPLACE\b|(\w+\s+)*?\w+\s+IF\s+NOT\s+EXISTS\b)", re.IGNORECASE
)


_COMPOUND_SET = re.compile(r"\bSET\b.*?\b\w+\s*[-+*/|]=", re.IGNORECASE | re.DOTALL)
_PREPARE = re.compile(r"\bPREPARE\s+(\w+)\s*(\([^)]*\))?\s+AS\s+", re.IGNORECASE)


def _unprepare(text: str, facts: SqlFacts) -> str:
    """``PREPARE p AS <stmt>`` becomes ``<stmt>``; ``EXECUTE p(...)`` of a prepared one runs it: dropped."""
    for match in _PREPARE.finditer(text):
        facts.prepared.add(match.group(1).lower())
    text = _PREPARE.sub("", text)
    for name in facts.prepared:
        text = re.sub(rf"\bEXECUTE\s+{re.escape(name)}\b[^;]*;?", "", text, flags=re.IGNORECASE)
    return text


def _parse(text: str, dialect: str | None, facts: SqlFacts) -> list[Any]:
    """The statements of ``text``; one that does not parse becomes a finding of its own.

    The whole text is parsed at once; when that fails (a PL/pgSQL body, a vendor extension),
    it is split the way Airflow's SQL hooks split it (sqlparse) and each statement is parsed
    alone, so one odd statement does not hide the others.
    """
    try:
        return [s for s in sqlglot.parse(text, read=dialect) if s is not None]
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        pass
    import sqlparse

    out: list[Any] = []
    for part in sqlparse.split(text):
        try:
            out += [s for s in sqlglot.parse(part, read=dialect) if s is not None]
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError) as exc:
            if _IDEMPOTENT_DDL.match(part):
                facts.findings.append(
                    Finding("safe", "idempotent_ddl", [Reason("idempotent DDL", _short(part))])
                )
                continue
            if _COMPOUND_SET.search(part):  # T-SQL's SET n += 1, which sqlglot does not read
                why = "an UPDATE adding to a column adds again on a re-run"
                facts.findings.append(Finding("risky", "increment", [Reason(why, _short(part))]))
                continue
            why = f"the SQL does not parse: {str(exc).splitlines()[0][:120]}"
            facts.findings.append(Finding("unknown", "unparsed_sql", [Reason(why, _short(part))]))
    return out


def classify_sql(
    sql: str,
    *,
    dialect: str | None,
    transactional: bool,
    markers: Collection[str],
    fix_for: dict[str, str] | None = None,
    facts: SqlFacts | None = None,
) -> SqlFacts:
    """One finding per statement of ``sql`` (already rendered), in order.

    ``transactional``: the operator runs all statements in one transaction (explicit ``BEGIN`` /
    ``COMMIT`` in the text count too). ``markers``: strings that only a value of this run contains
    (the sample context's date, run id, and the markers of parameters holding them).
    ``fix_for``: category -> the fix to name (the caller knows the connection and operator).
    ``facts``: the facts of earlier statements of the same transaction (a callable's cursor runs
    one ``execute`` per statement); the new findings are appended to them.
    """
    fixes = fix_for or {}
    facts = facts if facts is not None else SqlFacts()
    facts.dialect = dialect
    text = _unprepare(mark_placeholders(sql), facts)
    sqlglot_log = logging.getLogger("sqlglot")
    if (
        sqlglot_log.level != logging.ERROR
    ):  # a fallback to Command is our "unknown"; set once (it clears caches)
        sqlglot_log.setLevel(logging.ERROR)
    statements = _parse(text, dialect, facts)
    in_txn = transactional or any(isinstance(s, exp.Transaction) for s in statements)
    for stmt in statements:
        finding = _statement(stmt, fixes, markers, facts.temp, facts.cleared, in_txn, facts)
        if finding is not None:
            facts.findings.append(finding)
    facts.findings += facts.moves.settle()
    return facts


def _statement(
    stmt: exp.Expression,
    fixes: dict[str, str],
    markers: Collection[str],
    temp: set[str],
    cleared: dict[str, bool],
    in_txn: bool,
    facts: SqlFacts,
) -> Finding | None:
    if isinstance(stmt, exp.Transaction | exp.Commit | exp.Rollback):
        return None
    if isinstance(stmt, exp.Select | exp.Union | exp.Describe | exp.Show):
        if isinstance(stmt, exp.Select) and stmt.args.get("into") is not None:
            return Finding(
                "safe",
                "ddl",
                [Reason("SELECT INTO creates a table: a re-run fails, it adds nothing", _brief(stmt))],
            )
        facts.read += [_name(t) for t in stmt.find_all(exp.Table)]
        return Finding("safe", "read_only", [Reason("a read", _brief(stmt))])
    if isinstance(stmt, exp.Create):
        name = _table(stmt.this)
        if stmt.find(exp.TemporaryProperty) is not None:
            temp.add(name)
        facts.moves.create(name)
        if stmt.args.get("exists") or stmt.args.get("replace"):
            return Finding("safe", "idempotent_ddl", [Reason("idempotent DDL", _brief(stmt))])
        return Finding("safe", "ddl", [Reason("DDL a re-run fails on instead of repeating", _brief(stmt))])
    if isinstance(stmt, exp.Drop) and str(stmt.args.get("kind") or "").upper() in {"TABLE", "VIEW"}:
        for dropped in stmt.find_all(exp.Table):
            facts.moves.drop(_name(dropped))
    if isinstance(stmt, exp.Alter):
        atomic = in_txn and facts.dialect in TRANSACTIONAL_DDL
        moved = alter_finding(stmt, facts.moves, atomic=atomic)
        if moved is not None:
            return moved
    if isinstance(stmt, exp.Drop | exp.Alter | exp.Grant):
        return Finding("safe", "ddl", [Reason("DDL: repeating it adds nothing", _brief(stmt))])
    if isinstance(stmt, exp.TruncateTable):
        for t in stmt.expressions:
            cleared[t.sql()] = True
        return Finding("safe", "overwrite", [Reason("TRUNCATE: repeating it changes nothing", _brief(stmt))])
    if isinstance(stmt, exp.Delete):
        table = _table(stmt.this)
        cleared[table] = _is_scoped(stmt.args.get("where"), markers)
        return Finding(
            "safe", "delete", [Reason("a DELETE: repeating it removes nothing more", _brief(stmt))]
        )
    if isinstance(stmt, exp.Update):
        table = _table(stmt.this)
        facts.written.append(table)
        inc = increments(list(stmt.expressions), target_names(stmt.this))
        if inc:
            return Finding(
                "risky",
                "increment",
                [Reason("an UPDATE adding to a column adds again on a re-run", inc)],
                fixes.get("increment", ""),
            )
        return Finding(
            "safe",
            "idempotent_update",
            [Reason("an assignment: repeating it sets the same values", _brief(stmt))],
        )
    if isinstance(stmt, exp.Merge):
        facts.written.append(_table(stmt.this))
        return merge_finding(stmt, fixes.get("merge", ""), _brief(stmt))
    if isinstance(stmt, exp.Insert):
        table = _table(stmt.this)
        facts.written.append(table)
        if table in temp:
            return Finding("safe", "temporary", [Reason("writes a temporary table", _brief(stmt))])
        handled = insert_finding(stmt, fixes.get("merge", ""), _brief(stmt))
        if handled is not None:
            return handled
        if table in cleared:
            if in_txn and cleared[table]:
                return Finding(
                    "safe",
                    "partition_overwrite",
                    [Reason("DELETE of this run's rows then INSERT, in one transaction", _brief(stmt))],
                )
            why = "not in one transaction" if not in_txn else "the DELETE is not scoped to the run"
            return Finding(
                "risky",
                "overwrite_not_atomic",
                [Reason(f"DELETE then INSERT {why}: two attempts can both insert", _short(stmt))],
                fixes.get("overwrite", ""),
            )
        if inserts_missing_only(stmt, table):
            why = "inserts only the rows the table does not hold yet (NOT EXISTS / NOT IN)"
            return Finding("safe", "insert_missing", [Reason(why, _brief(stmt))])
        return Finding(
            "risky",
            "append",
            [Reason("an INSERT without a key: a re-run appends the rows again", _short(stmt))],
            fixes.get("append", ""),
        )
    if isinstance(stmt, exp.Copy):
        params = {
            p.this.sql().upper(): p.expression.sql().upper() if p.expression else ""
            for p in stmt.args.get("params") or []
        }
        target = stmt.this.sql()
        if target.startswith("@") or not stmt.args.get("kind"):
            return Finding(
                "safe", "export", [Reason("an export to a fixed location overwrites itself", _brief(stmt))]
            )
        if params.get("FORCE") == "TRUE":
            return Finding(
                "risky",
                "append",
                [Reason("COPY INTO ... FORCE = TRUE loads the files again", _short(stmt))],
                fixes.get("append", ""),
            )
        if any(isinstance(f, exp.Table) for f in stmt.args.get("files") or []):
            return Finding(
                "safe",
                "load_once",
                [Reason("COPY INTO from a stage skips files it already loaded", _brief(stmt))],
            )
        facts.written.append(target)
        if (in_txn and cleared.get(target)) or (in_txn and cleared.get(_table(stmt.this))):
            return Finding(
                "safe",
                "partition_overwrite",
                [Reason("the table is cleared then loaded in one transaction", _brief(stmt))],
            )
        return Finding(
            "risky",
            "append",
            [Reason("COPY ... FROM a file appends its rows again", _short(stmt))],
            fixes.get("append", ""),
        )
    if isinstance(stmt, exp.Command):
        return _command_finding(stmt, stmt.sql(), facts)
    if isinstance(stmt, exp.Set | exp.Use | exp.Pragma):
        return None
    return Finding(
        "unknown",
        "unparsed_sql",
        [Reason(f"{type(stmt).__name__}: a statement the scan cannot classify", _short(stmt))],
    )
