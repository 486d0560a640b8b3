"""A fenced write as one PostgreSQL ``DO`` block, so it commits even if its sender is killed.

A killed client's open transaction rolls back, but a statement already running in autocommit
completes and commits after its client is gone (docs/design.md, "Server-side unit and adoption").
So the whole write (the user's statements, crashsafe's checks, the fence commit and the unit's
own "committed" record) is one anonymous PL/pgSQL block (``DO``) run in autocommit:

1. take the slot's advisory lock (it marks the unit in flight for any newer attempt);
2. refuse at once if a newer token was issued meanwhile (a stale unit does no work);
3. run the statements; checks that depend on the data raise coded errors (``CS***``);
4. lock the fence row and commit the token — a newer token makes it raise, rolling back all;
5. mark the unit committed with its result.

Values reach the block as literals rendered by the driver itself (``mogrify``), and each
statement runs through ``EXECUTE`` of a dollar-quoted string, so no user text is parsed as
PL/pgSQL and no PL/pgSQL variable can capture a column name.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_crashsafe.store.dbapi import Db

__all__ = ["UNIT_ERRORS", "UnitFailure", "UnitProgram", "dollar_quote", "render_sql", "unit_failure"]

#: SQLSTATEs the block raises (class "CS" is not used by PostgreSQL) -> what they mean.
UNIT_ERRORS = {
    "CSSTL": "stale at start",
    "CSFEN": "stale at commit",
    "CSNUL": "null natural key",
    "CSDUP": "duplicate natural keys",
    "CSOUT": "rows outside the partition",
}


def render_sql(db: Db, sql: str, params: Any) -> str:
    """``sql`` with ``params`` rendered as literals by the driver (psycopg 2 or 3)."""
    if params is None:
        return sql
    raw = db.raw
    module = type(raw).__module__
    if module.startswith("psycopg2"):
        with raw.cursor() as cursor:
            text = cursor.mogrify(sql, params)
        return (
            text.decode(getattr(raw, "encoding", None) or "utf-8") if isinstance(text, bytes) else str(text)
        )
    import psycopg

    return str(psycopg.ClientCursor(raw).mogrify(sql, params))


def dollar_quote(text: str) -> str:
    """``text`` as a dollar-quoted literal that ends only at its closing tag.

    The tag must not occur in the text, nor straddle its end: text ending in ``$cs<hex>`` (the
    tag minus its final ``$``) would be closed by the first ``$`` of the closing tag.
    """
    while True:
        tag = f"$cs{secrets.token_hex(6)}$"
        if (text + tag).find(tag) == len(text):
            return f"{tag}{text}{tag}"


@dataclass
class UnitProgram:
    """The body of the unit's ``DO`` block, built step by step by an operator."""

    #: the fence's values, for statements that store them with the output
    token: int = 0
    try_number: int = 0
    counters: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    #: counters reported in the result (default: all); ``constants`` are added as they are
    result_keys: list[str] | None = None
    constants: dict[str, int] = field(default_factory=dict)

    def _counter(self, name: str) -> str:
        if not name.isidentifier():
            raise ValueError(f"counter name {name!r} must be an identifier")
        if name not in self.counters:
            self.counters.append(name)
        return f"cs_{name}"

    def execute(self, sql: str, *, count_as: str | None = None, add: bool = False) -> None:
        """Run ``sql``; with ``count_as``, keep (or ``add`` to) its row count in the result."""
        self.lines.append(f"EXECUTE {dollar_quote(sql)};")
        if count_as:
            var = self._counter(count_as)
            if add:
                self.lines.append("GET DIAGNOSTICS cs_n = ROW_COUNT;")
                self.lines.append(f"{var} := {var} + cs_n;")
            else:
                self.lines.append(f"GET DIAGNOSTICS {var} = ROW_COUNT;")

    def select_into(self, sql: str, *names: str) -> None:
        """Run a one-row query into result counters (bigint)."""
        targets = ", ".join(self._counter(n) for n in names)
        self.lines.append(f"EXECUTE {dollar_quote(sql)} INTO {targets};")

    def fail_if_positive(self, name: str, code: str, detail_sql: str | None = None) -> None:
        """Raise ``code`` when counter ``name`` is > 0; the detail (JSON) from ``detail_sql``."""
        var = self._counter(name)
        detail = f"EXECUTE {dollar_quote(detail_sql)} INTO cs_detail;" if detail_sql else "cs_detail := '';"
        self.lines.append(
            f"IF {var} > 0 THEN {detail} RAISE EXCEPTION USING ERRCODE = '{code}', "
            f"MESSAGE = 'crashsafe: {UNIT_ERRORS[code]}', DETAIL = coalesce(cs_detail, ''); END IF;"
        )

    def guarded_execute(self, sql: str, count_as: str, *, on_division_by_zero: str, code: str) -> None:
        """Run ``sql``; if it divides by zero (a row-level guard), count with ``on_division_by_zero``.

        The diagnosis query returns (total, offending); offending > 0 raises ``code`` with both in
        the detail, otherwise the original error stands (it was the user's own division).
        """
        var = self._counter(count_as)
        self.lines.append(
            f"BEGIN EXECUTE {dollar_quote(sql)}; GET DIAGNOSTICS {var} = ROW_COUNT;\n"
            "EXCEPTION WHEN division_by_zero THEN\n"
            f"  EXECUTE {dollar_quote(on_division_by_zero)} INTO cs_total, cs_bad;\n"
            f"  IF cs_bad > 0 THEN RAISE EXCEPTION USING ERRCODE = '{code}', "
            f"MESSAGE = 'crashsafe: {UNIT_ERRORS[code]}', "
            "DETAIL = json_build_object('total', cs_total, 'outside', cs_bad)::text; END IF;\n"
            "  RAISE;\nEND;"
        )

    def render(self, *, lock_sql: str, start_check_sql: str, commit_sql: str, finish_sql: str) -> str:
        """The whole ``DO`` block. ``finish_sql`` is run with the result JSON (text) as ``$1``."""
        declare = ["cs_n bigint := 0;", "cs_total bigint;", "cs_bad bigint;", "cs_detail text;"]
        declare += [f"cs_{name} bigint := 0;" for name in self.counters]
        pairs = [f"'{n}', cs_{n}" for n in (self.counters if self.result_keys is None else self.result_keys)]
        pairs += [f"'{n}', {int(v)}" for n, v in self.constants.items() if n.isidentifier()]
        result = "json_build_object(" + ", ".join(pairs) + ")::text"
        body = [
            f"PERFORM {lock_sql};",
            f"EXECUTE {dollar_quote(start_check_sql)} INTO cs_n;",
            "IF cs_n = 0 THEN RAISE EXCEPTION USING ERRCODE = 'CSSTL', "
            f"MESSAGE = 'crashsafe: {UNIT_ERRORS['CSSTL']}'; END IF;",
            *self.lines,
            f"EXECUTE {dollar_quote(commit_sql)};",
            "GET DIAGNOSTICS cs_n = ROW_COUNT;",
            "IF cs_n <> 1 THEN RAISE EXCEPTION USING ERRCODE = 'CSFEN', "
            f"MESSAGE = 'crashsafe: {UNIT_ERRORS['CSFEN']}'; END IF;",
            f"EXECUTE {dollar_quote(finish_sql)} USING {result};",
        ]
        text = "DECLARE\n  " + "\n  ".join(declare) + "\nBEGIN\n" + "\n".join(body) + "\nEND"
        return f"DO {dollar_quote(text)}"


@dataclass(frozen=True)
class UnitFailure:
    """A coded error raised by a unit's block, decoded."""

    code: str
    detail: Mapping[str, Any] | Sequence[Any] | None


def unit_failure(exc: BaseException) -> UnitFailure | None:
    """The coded failure inside a database error raised by a unit, or None for any other error."""
    code = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if code not in UNIT_ERRORS:
        return None
    diag = getattr(exc, "diag", None)
    raw = getattr(diag, "message_detail", None) or ""
    try:
        detail = json.loads(raw) if raw else None
    except ValueError:
        detail = None
    return UnitFailure(str(code), detail)
