"""Table swaps and renames: what a re-run after success does to the live table.

A swap publishes a table built elsewhere under the live name: ``ALTER TABLE live RENAME TO old;
ALTER TABLE new RENAME TO live; DROP TABLE old``, or ``DROP TABLE IF EXISTS live`` then a rename,
or Snowflake's ``ALTER TABLE live SWAP WITH new``. Run again after it succeeded, the first steps
act on the live table (which now holds the new data) and the step that brings ``new`` in fails
(``new`` is gone) or swaps the old data back: the live table is lost or rolled back. On engines
whose DDL commits at once (Snowflake, MySQL, BigQuery, Oracle) nothing undoes that.

The same statements are harmless when the task builds the incoming table itself first (``CREATE
[OR REPLACE] TABLE new AS ...``): a re-run rebuilds it and publishes it again. A lone rename is
harmless too: repeated, it fails before changing anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlglot import exp

from airflow_crashsafe.scan.model import Finding, Reason

__all__ = ["SWAP_FIX", "alter_finding", "command_moves"]

SWAP_FIX = (
    "build the incoming table in the same task (CREATE OR REPLACE TABLE <new> AS ...) before the swap, "
    "or publish with CREATE OR REPLACE TABLE <live> AS SELECT ... / a PartitionOverwriteOperator, "
    "so a re-run rebuilds instead of moving the live table away"
)
_RENAME_TABLE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.+)$", re.IGNORECASE | re.DOTALL)
_EXCHANGE = re.compile(r"\bEXCHANGE\s+PARTITION\b.*\bWITH\s+TABLE\s+([\w.`\"]+)", re.IGNORECASE | re.DOTALL)


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


def _moves(
    pairs: Iterable[tuple[str, str]], created: set[str], gone: set[str], evidence: str
) -> Finding | None:
    """Renames ``src -> dst`` in order, against the tables built and cleared earlier in the task."""
    finding: Finding | None = None
    for src, dst in pairs:
        if src not in created and dst in gone and finding is None:
            finding = _risky(
                f"{src} is renamed to {dst} after {dst} was dropped or moved away in the same task: "
                f"a re-run after success moves the live {dst} away again and cannot bring {src} back",
                evidence,
            )
        gone.add(src)
        gone.discard(dst)
        if src in created:
            created.add(dst)
    return finding


def alter_finding(stmt: exp.Alter, created: set[str], gone: set[str]) -> Finding | None:
    """The finding of an ``ALTER TABLE`` that renames or swaps tables; None for other changes."""
    source = _full(stmt.this)
    for action in stmt.args.get("actions") or []:
        if isinstance(action, exp.SwapTable):
            other = _full(action.this)
            if source in created or other in created:
                return None
            return _risky(
                f"ALTER TABLE {source} SWAP WITH {other}: a re-run swaps the tables back", stmt.sql()[:160]
            )
        if isinstance(action, exp.AlterRename):
            return _moves([(source, _norm(_full(action.this), source))], created, gone, stmt.sql()[:160])
    return None


def command_moves(text: str, created: set[str], gone: set[str]) -> Finding | None:
    """MySQL's ``RENAME TABLE a TO b, c TO d`` and ``EXCHANGE PARTITION ... WITH TABLE``."""
    exchange = _EXCHANGE.search(text)
    if exchange is not None:
        if _norm(exchange.group(1)) in created:
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
    return _moves(pairs, created, gone, text[:160]) or Finding(
        "safe", "ddl", [Reason("RENAME TABLE: a re-run fails before changing anything", text[:160])]
    )
