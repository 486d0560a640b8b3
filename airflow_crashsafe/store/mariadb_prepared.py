"""The fence's per-write statements as MariaDB prepared statements (SQL ``PREPARE`` / ``EXECUTE``).

Why: MariaDB parses every text statement, and the token's upsert and the compound fence check are
long: parsing the two cost about 0.08 ms of server CPU per fenced write, a tenth of what fencing
adds to a 1-row write (``benchmarks/fencing_mariadb.py``). But preparing costs more than it saves
once: a ``PREPARE`` and an ``EXECUTE`` of both took 0.11 ms longer than the text. So a connection
sends a statement as text the first time, prepares it the second time, in the same round trip as
that use (``PREPARE …; EXECUTE … USING …``), and from then on sends only the short ``EXECUTE``
(0.06 ms faster than the text): an operator, which opens a connection per write, pays nothing, and
a loop of writes on one connection gains from its fourth write. MariaDB (10.2+) takes literals in
``USING``; MySQL wants user variables, so MySQL connections keep the text statements.

A statement the server no longer knows (a reset connection, a ``DEALLOCATE``) is prepared again.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_crashsafe.store.dbapi import NAMED_PARAM, Db

__all__ = ["run_prepared"]

_UNKNOWN_STATEMENT = 1243  # ER_UNKNOWN_STMT_HANDLER
T = TypeVar("T")


@dataclass(frozen=True)
class _Shape:
    """One statement as sent: its name on the server, and the two texts that use it."""

    name: str
    prepare: str  # PREPARE <name> FROM '<the statement with ? placeholders>'
    execute: str  # EXECUTE <name> USING %(a)s, %(b)s, … (pyformat, filled in by the driver)


@functools.lru_cache(maxsize=32)
def _shape(sql: str) -> _Shape:
    names: list[str] = []

    def mark(match: re.Match[str]) -> str:
        names.append(match.group(1))
        return "?"

    text = NAMED_PARAM.sub(mark, sql).replace("%%", "%")
    # A name per text: a process that changed a statement never runs the old one by its name.
    name = "crashsafe_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    # The text goes inside a quoted literal (no backslash escapes: NO_BACKSLASH_ESCAPES may be on)
    # of a statement the driver fills in with ``%``.
    if "\\" in text:
        raise ValueError("a prepared fence statement must not contain a backslash")
    quoted = text.replace("'", "''").replace("%", "%%")
    using = ", ".join(f"%({n})s" for n in names)
    return _Shape(name, f"PREPARE {name} FROM '{quoted}'", f"EXECUTE {name} USING {using}")


def run_prepared(
    db: Db,
    sql: str,
    then: str,
    params: Mapping[str, Any],
    send: Callable[[str, Mapping[str, Any], int], T],
) -> T:
    """Send ``sql`` (crashsafe's ``%(name)s`` form), then ``then``: as text on the connection's
    first use of ``sql``, as a prepared statement from its second.

    ``send(text, params, result)`` sends the statements as one round trip (``multi_statements``)
    and reads their results; ``result`` is the index of the ``EXECUTE``'s among them.
    """
    shape = _shape(sql)
    if shape.name not in db.sql_used:
        out = send("; ".join([sql, then] if then else [sql]), params, 0)
        db.sql_used.add(shape.name)
        return out
    known = shape.name in db.sql_prepared
    parts = ([] if known else [shape.prepare]) + [shape.execute] + ([then] if then else [])
    try:
        out = send("; ".join(parts), params, 0 if known else 1)
    except Exception as exc:
        if not known or _error_code(exc) != _UNKNOWN_STATEMENT:
            raise
        db.sql_prepared.discard(shape.name)
        return run_prepared(db, sql, then, params, send)
    db.sql_prepared.add(shape.name)
    return out


def _error_code(exc: Exception) -> int | None:
    code = exc.args[0] if exc.args else None
    return code if isinstance(code, int) else None
