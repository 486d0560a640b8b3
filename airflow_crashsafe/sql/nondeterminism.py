"""Find calls whose result differs between two attempts of the same task (now(), random(), ...).

A MERGE whose source reads the clock or a sequence writes different rows on a re-run, so a retry
is not a no-op. Detection is textual, on the SQL with comments removed and string literals and
quoted identifiers blanked, so ``-- now()`` or ``'random()'`` do not count. The one literal that
does count is ``'now'`` (SQLite's ``datetime('now')``, PostgreSQL's ``'now'::timestamptz``), so it
is looked for in the literals before they are blanked. ``pg_sleep`` is slow, not non-deterministic.
"""

from __future__ import annotations

import re

__all__ = ["NONDETERMINISTIC_FUNCTIONS", "NONDETERMINISTIC_KEYWORDS", "find_nondeterministic", "strip_sql"]

#: Functions that return something new on every call (PostgreSQL, its uuid-ossp/pgcrypto, SQLite).
NONDETERMINISTIC_FUNCTIONS = (
    "now",
    "clock_timestamp",
    "statement_timestamp",
    "transaction_timestamp",
    "timeofday",
    "random",
    "random_normal",
    "setseed",
    "nextval",
    "currval",
    "lastval",
    "gen_random_uuid",
    "gen_random_bytes",
    "uuid_generate_v1",
    "uuid_generate_v1mc",
    "uuid_generate_v4",
    "txid_current",
    "pg_current_xact_id",
    "randomblob",
)

#: SQL-standard time keywords, non-deterministic with or without parentheses.
NONDETERMINISTIC_KEYWORDS = (
    "current_timestamp",
    "current_date",
    "current_time",
    "localtimestamp",
    "localtime",
)

# SQLite date/time functions: with a 'now' argument, or (for these) with no argument at all.
_SQLITE_TIME_FUNCTIONS = ("date", "time", "datetime", "julianday", "unixepoch", "strftime", "timediff")
_SQLITE_NOARG_NOW = ("date", "time", "datetime", "julianday", "unixepoch")

_NOW_MARK = "'now'"
_FUNCTION_RE = re.compile(r"\b(" + "|".join(NONDETERMINISTIC_FUNCTIONS) + r")\s*\(", re.IGNORECASE)
_KEYWORD_RE = re.compile(r"(?<![.\w])(" + "|".join(NONDETERMINISTIC_KEYWORDS) + r")\b", re.IGNORECASE)
_TIME_NOW_RE = re.compile(r"\b(" + "|".join(_SQLITE_TIME_FUNCTIONS) + r")\s*\([^()]*'now'", re.IGNORECASE)
_TIME_NOARG_RE = re.compile(r"(?<![.\w])(" + "|".join(_SQLITE_NOARG_NOW) + r")\s*\(\s*\)", re.IGNORECASE)
_DOLLAR_TAG_RE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _skip_quoted(sql: str, i: int, quote: str, backslash: bool) -> tuple[int, str]:
    """From the opening quote at ``i``: (index after the closing quote, the literal's content)."""
    buf: list[str] = []
    j, n = i + 1, len(sql)
    while j < n:
        ch = sql[j]
        if backslash and ch == "\\" and j + 1 < n:
            buf.append(sql[j + 1])
            j += 2
            continue
        if ch == quote:
            if j + 1 < n and sql[j + 1] == quote:
                buf.append(quote)
                j += 2
                continue
            return j + 1, "".join(buf)
        buf.append(ch)
        j += 1
    return n, "".join(buf)  # unterminated: the rest is the literal


def _skip_block_comment(sql: str, i: int) -> int:
    """From ``/*`` at ``i``: the index after the matching ``*/`` (PostgreSQL nests them)."""
    depth, j, n = 0, i, len(sql)
    while j < n:
        if sql.startswith("/*", j):
            depth += 1
            j += 2
        elif sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    return n


def _literal(content: str) -> str:
    return _NOW_MARK if content.strip().lower() == "now" else "''"


def _scan(sql: str) -> str:
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        prev_word = i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif sql.startswith("/*", i):
            i = _skip_block_comment(sql, i)
            out.append(" ")
        elif ch == "'":
            i, content = _skip_quoted(sql, i, "'", backslash=False)
            out.append(_literal(content))
        elif ch in "eE" and not prev_word and i + 1 < n and sql[i + 1] == "'":
            i, content = _skip_quoted(sql, i + 1, "'", backslash=True)
            out.append(" " + _literal(content))
        elif ch in '"`':
            i, _ = _skip_quoted(sql, i, ch, backslash=False)
            out.append(" _ ")
        elif ch == "$" and not prev_word and (m := _DOLLAR_TAG_RE.match(sql, i)):
            end = sql.find(m.group(0), m.end())
            content = sql[m.end() : end] if end >= 0 else sql[m.end() :]
            i = n if end < 0 else end + len(m.group(0))
            out.append(_literal(content))
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def strip_sql(sql: str) -> str:
    """``sql`` without comments, with string literals blanked (``'now'`` kept) and quoted names as ``_``."""
    return _scan(sql)


def find_nondeterministic(sql: str) -> list[str]:
    """The non-deterministic calls in ``sql``, in order of first appearance, e.g. ``["now()"]``."""
    code = _scan(sql)
    found: list[tuple[int, str]] = []
    found += [(m.start(), m.group(1).lower() + "()") for m in _FUNCTION_RE.finditer(code)]
    found += [(m.start(), m.group(1).lower()) for m in _KEYWORD_RE.finditer(code)]
    time_now = list(_TIME_NOW_RE.finditer(code))
    found += [(m.start(), m.group(1).lower() + "('now')") for m in time_now]
    found += [(m.start(), m.group(1).lower() + "()") for m in _TIME_NOARG_RE.finditer(code)]
    pos = code.find(_NOW_MARK)
    while pos >= 0:  # a 'now' outside a date/time call: PostgreSQL's 'now'::timestamp and the like
        if not any(m.start() <= pos < m.end() for m in time_now):
            found.append((pos, "'now'"))
        pos = code.find(_NOW_MARK, pos + 1)
    names: list[str] = []
    for _, name in sorted(found):
        if name not in names:
            names.append(name)
    return names
