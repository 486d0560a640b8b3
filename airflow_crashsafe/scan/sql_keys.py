"""Upserts and merges judged by their key: does a re-run find the rows the first run wrote?

A ``MERGE`` or ``ON CONFLICT`` upsert is replay-safe when it matches on a key the data carries. It
is not when:

- it adds to a column of the target (``SET n = n + 1``, ``total = t.total + excluded.total``):
  the target's own column read again on the right of its assignment, whatever alias names it;
- the key it matches on is generated afresh by each run (``nextval``, ``seq.nextval``,
  ``NEXT VALUE FOR``, ``gen_random_uuid()``, ``UUID_STRING()``), in its source or in the values it
  inserts into a matched column: it never matches, so every run inserts. A surrogate key drawn
  for a row matched on its business key is fine. An ``ON CONFLICT`` upsert inserting a generated
  value is assumed to conflict on it (the scan does not see the table's unique constraints).

It also tells an ``INSERT`` that only adds the rows the target does not hold yet (``WHERE NOT
EXISTS`` / ``NOT IN`` on the target, an anti-join ``LEFT JOIN <target> ... WHERE <target>.k IS
NULL``, ``EXCEPT SELECT ... FROM <target>``).
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from airflow_crashsafe.scan.model import Finding, Reason

__all__ = [
    "GENERATORS",
    "increments",
    "insert_finding",
    "inserts_missing_only",
    "merge_finding",
    "target_names",
]

GENERATORS = re.compile(
    r"\b(nextval|gen_random_uuid|uuid_generate_v\d\w*|uuid_string|generate_uuid|uuid|newid|random|rand|sys_guid)"
    r"\s*\(|\.nextval\b|\bnext\s+value\s+for\b",
    re.IGNORECASE,
)


def _name(table: exp.Table) -> str:
    return ".".join(p for p in (table.catalog, table.db, table.name) if p)


def target_names(target: exp.Expression | None) -> set[str]:
    """The names a statement's target table goes by: its name, its full name, its alias."""
    table = (
        target if isinstance(target, exp.Table) else target.find(exp.Table) if target is not None else None
    )
    if table is None:
        return set()
    names = {table.name.lower(), _name(table).lower()}
    if table.alias:
        names.add(table.alias.lower())
    return names


def increments(assignments: list[exp.Expression], target: set[str]) -> str | None:
    """The first ``col = <expr reading the target's col>`` assignment, as SQL text.

    A column counts when it is unqualified or qualified by a name of the target (not
    ``excluded``/the source), and is not inside a subquery of the right-hand side.
    """
    for eq in assignments:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            continue
        name = eq.this.name.lower()
        value = eq.expression
        if isinstance(value, exp.Column):
            continue
        for col in value.find_all(exp.Column):
            qualifier = col.table.lower()
            if col.name.lower() != name or col.find_ancestor(exp.Select) is not None:
                continue
            if (not qualifier or qualifier in target) and _accumulates(col, value):
                return eq.sql()
    return None


_ACCUMULATING = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.DPipe, exp.ArrayConcat, exp.Concat)
_ACCUMULATING_FUNCS = {"array_append", "array_cat", "array_prepend", "jsonb_insert", "concat", "concat_ws"}


def _accumulates(col: exp.Column, value: exp.Expression) -> bool:
    """True when the column is added to (``n + 1``, ``tags || x``), not only tested (``CASE``)."""
    node: Any = col
    while node is not None and node is not value.parent:
        if isinstance(node, _ACCUMULATING):
            return True
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in _ACCUMULATING_FUNCS:
            return True
        node = node.parent
    return False


def _generated_key(stmt: exp.Merge) -> str | None:
    """The source column the ``ON`` condition matches on, when the source generates it."""
    on = stmt.args.get("on")
    if on is None:
        return None
    if GENERATORS.search(on.sql()):
        return on.sql()
    keys = {c.name.lower() for c in on.find_all(exp.Column)}
    source = stmt.args.get("using")
    select = source.find(exp.Select) if source is not None else None
    if select is None:
        return None
    for projection in select.expressions:
        if projection.alias_or_name.lower() in keys and GENERATORS.search(projection.sql()):
            return projection.sql()
    return None


def _generates_key(insert: exp.Insert, stmt: exp.Merge) -> bool:
    """True when the MERGE's INSERT puts a generated value in a column its ``ON`` matches on.

    A surrogate key drawn from a sequence for a row matched on its business key is fine: a re-run
    matches the business key. Without a column list the scan cannot tell, so it assumes the worst.
    """
    values = insert.expression
    if values is None or not GENERATORS.search(values.sql()):
        return False
    columns = insert.this.expressions if isinstance(insert.this, exp.Tuple) else []
    items = values.expressions if isinstance(values, exp.Tuple) else []
    on = stmt.args.get("on")
    if not columns or len(columns) != len(items) or on is None:
        return True
    keys = {c.name.lower() for c in on.find_all(exp.Column)}
    return any(
        c.name.lower() in keys and GENERATORS.search(v.sql()) for c, v in zip(columns, items, strict=True)
    )


def merge_finding(stmt: exp.Merge, fix: str, brief: str) -> Finding:
    target = target_names(stmt.this)
    generated = _generated_key(stmt)
    if generated is not None:
        why = "a MERGE matching on a key its source generates never matches: every run inserts again"
        return Finding("risky", "generated_key_merge", [Reason(why, generated)], fix)
    for when in stmt.find_all(exp.When):
        then = when.args.get("then")
        if isinstance(then, exp.Update):
            inc = increments(list(then.expressions), target)
            if inc:
                return Finding(
                    "risky", "increment", [Reason("a MERGE that adds to a column counts twice", inc)], fix
                )
        if isinstance(then, exp.Insert) and _generates_key(then, stmt):
            return Finding(
                "risky",
                "generated_key_merge",
                [
                    Reason(
                        "a MERGE inserting a generated value into its match key inserts twice",
                        then.sql()[:160],
                    )
                ],
                fix,
            )
    return Finding("safe", "natural_key_merge", [Reason("MERGE on a key: a re-run finds its rows", brief)])


def insert_finding(stmt: exp.Insert, fix: str, brief: str) -> Finding | None:
    """The verdict of an INSERT that handles conflicts itself; None for a plain append."""
    conflict = stmt.args.get("conflict")
    if stmt.args.get("overwrite"):
        return Finding("safe", "overwrite", [Reason("INSERT OVERWRITE replaces what was there", brief)])
    if conflict is None and not stmt.args.get("ignore"):
        return None
    values = stmt.expression.sql() if stmt.expression is not None else ""
    if GENERATORS.search(values):
        return Finding(
            "risky",
            "generated_key_merge",
            [Reason("an upsert inserting a generated key inserts twice", stmt.sql()[:160])],
            fix,
        )
    if conflict is not None:
        inc = increments(list(conflict.args.get("expressions") or []), target_names(stmt.this))
        if inc:
            return Finding(
                "risky", "increment", [Reason("an upsert that adds to a column counts twice", inc)], fix
            )
    return Finding(
        "safe", "natural_key_merge", [Reason("an upsert on a key: a re-run finds its rows", brief)]
    )


def inserts_missing_only(stmt: exp.Insert, table: str) -> bool:
    """True when the INSERT's source leaves out the rows ``table`` already holds."""
    source = stmt.expression
    if source is None:
        return False
    for neg in source.find_all(exp.Not):
        inner = neg.this
        if isinstance(inner, exp.Exists | exp.In) and any(
            _name(t) == table for t in inner.find_all(exp.Table)
        ):
            return True
    for join in source.find_all(exp.Join):
        joined = join.this if isinstance(join.this, exp.Table) else None
        if joined is None or _name(joined) != table or join.side.upper() != "LEFT":
            continue
        alias = (joined.alias or joined.name).lower()
        select = join.find_ancestor(exp.Select)
        where = select.args.get("where") if select is not None else None
        if where is not None and any(
            isinstance(i.this, exp.Column)
            and i.this.table.lower() in {alias, table.lower()}
            and isinstance(i.expression, exp.Null)
            for i in where.find_all(exp.Is)
        ):
            return True
    return any(
        any(_name(t) == table for t in e.expression.find_all(exp.Table)) for e in source.find_all(exp.Except)
    )
