"""Table swaps and renames: what a re-run after success does to the live table.

A swap publishes a table built elsewhere under the live name: ``ALTER TABLE live RENAME TO old;
ALTER TABLE new RENAME TO live; DROP TABLE old``, or ``DROP TABLE IF EXISTS live`` then a rename,
or Snowflake's ``ALTER TABLE live SWAP WITH new``. Run again after it succeeded, the first steps
act on the live table (which now holds the new data) and the step that brings ``new`` in fails
(``new`` is gone) or swaps the old data back: the live table is lost or rolled back. On engines
whose DDL commits at once (Snowflake, MySQL, BigQuery, Oracle) nothing undoes that.

The same statements are harmless when the task builds the incoming table itself first (``CREATE
[OR REPLACE] TABLE new AS ...``): a re-run rebuilds it and publishes it again. A lone rename is
harmless too: repeated, it fails before changing anything; and so is a whole swap run as one
transaction on an engine whose DDL is transactional (PostgreSQL, SQLite, DuckDB, Redshift) when
the rename that brings ``new`` in is not guarded: repeated, it fails there and rolls back. Guarded
(``ALTER TABLE IF EXISTS new RENAME TO live``), it completes without ``new``: the live table is
gone. MySQL's ``RENAME TABLE a TO b, c TO d`` is one atomic statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlglot import exp

from airflow_crashsafe.scan.model import Finding, Reason

__all__ = ["SWAP_FIX", "TRANSACTIONAL_DDL", "Moves", "alter_finding", "command_moves"]

#: sqlglot dialects whose DDL rolls back with the transaction.
TRANSACTIONAL_DDL = frozenset({"postgres", "sqlite", "duckdb", "redshift"})
SWAP_FIX = (
    "build the incoming table in the same task (CREATE OR REPLACE TABLE <new> AS ...) before the swap, "
    "or publish with CREATE OR REPLACE TABLE <live> AS SELECT ... / a PartitionOverwriteOperator, "
    "so a re-run rebuilds instead of moving the live table away"
)
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.+)$", re.IGNORECASE | re.DOTALL)
_EXCHANGE = re.compile(r"\bEXCHANGE\s+PARTITION\b.*\bWITH\s+TABLE\s+([\w.`\"]+)", re.IGNORECASE | re.DOTALL)


@dataclass
class Moves:
    """What a task's statements did to table names so far.

    ``pending``: renames into a name the task had cleared, keyed by the incoming table; one is
    harmless if that table is itself renamed into later (it was the live table being moved
    aside, not an incoming one), so they are reported once the task's SQL has been read.
    """

    created: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    targets: set[str] = field(default_factory=set)
    pending: dict[str, Finding] = field(default_factory=dict)

    def drop(self, name: str) -> None:
        self.gone.add(_norm(name))
        self.created.discard(_norm(name))

    def create(self, name: str) -> None:
        self.created.add(_norm(name))
        self.gone.discard(_norm(name))

    def settle(self) -> list[Finding]:
        """The risky swaps found, once no later rename can show they were a move aside."""
        out = [f for src, f in self.pending.items() if src not in self.targets]
        self.pending.clear()
        return out


def _norm(name: str, like: str = "") -> str:
    """Lower-case, unquoted; an unqualified rename target lives in the source's schema."""
    name = name.replace('"', "").replace("`", "").lower()
    if "." not in name and "." in like:
        return f"{like.rsplit('.', 1)[0]}.{name}"
    return name


def _full(table: exp.Expression | None) -> str:
    if not isinstance(table, exp.Table):
        table = table.find(exp.Table) if table is not None else None
    if table is None:
        return "?"
    return _norm(".".join(p for p in (table.catalog, table.db, table.name) if p))


def _risky(why: str, evidence: str) -> Finding:
    return Finding("risky", "table_swap", [Reason(why, evidence)], SWAP_FIX)


def _moves(pairs: list[tuple[str, str]], moves: Moves, evidence: str, *, undone: bool) -> None:
    """Renames ``src -> dst`` in order, against the tables built and cleared earlier in the task.

    ``undone``: a repeat that fails at this rename undoes the steps before it (one transaction of
    transactional DDL, an unguarded rename), so nothing is lost. Renames of one statement see only
    what earlier statements cleared (MySQL's multi-table ``RENAME TABLE`` is atomic).
    """
    cleared = set(moves.gone)
    for src, dst in pairs:
        moves.targets.add(dst)
        if src not in moves.created and dst in cleared and not undone:
            moves.pending.setdefault(
                src,
                _risky(
                    f"{src} is renamed to {dst} after {dst} was dropped or moved away in the same task: "
                    f"a re-run after success moves the live {dst} away again and has no {src} to bring in",
                    evidence,
                ),
            )
        moves.gone.add(src)
        moves.gone.discard(dst)
        if src in moves.created:
            moves.created.add(dst)


def alter_finding(stmt: exp.Alter, moves: Moves, *, atomic: bool) -> Finding | None:
    """The finding of an ``ALTER TABLE`` that swaps tables (renames are settled later); None otherwise.

    ``atomic``: the statement runs in one transaction with the ones before it, on an engine whose
    DDL is transactional.
    """
    source = _full(stmt.this)
    for action in stmt.args.get("actions") or []:
        if isinstance(action, exp.SwapTable):
            other = _full(action.this)
            if source in moves.created or other in moves.created:
                return None
            return _risky(
                f"ALTER TABLE {source} SWAP WITH {other}: a re-run swaps the tables back", stmt.sql()[:160]
            )
        if isinstance(action, exp.AlterRename):
            undone = atomic and not stmt.args.get("exists")
            _moves([(source, _norm(_full(action.this), source))], moves, stmt.sql()[:160], undone=undone)
    return None


def command_moves(text: str, moves: Moves, *, atomic: bool) -> Finding | None:
    """MySQL's ``RENAME TABLE a TO b, c TO d`` and ``EXCHANGE PARTITION ... WITH TABLE``."""
    exchange = _EXCHANGE.search(text)
    if exchange is not None:
        if _norm(exchange.group(1)) in moves.created:
            return None
        return _risky("EXCHANGE PARTITION: a re-run exchanges the partitions back", text[:160])
    match = _RENAME_TABLE.match(text)
    if match is None:
        return None
    pairs = []
    for part in match.group(1).split(","):
        words = part.split()
        if len(words) == 3 and words[1].upper() == "TO":
            pairs.append((_norm(words[0]), _norm(words[2], _norm(words[0]))))
    _moves(pairs, moves, text[:160], undone=atomic)
    return Finding(
        "safe", "ddl", [Reason("RENAME TABLE: a re-run fails before changing anything", text[:160])]
    )
