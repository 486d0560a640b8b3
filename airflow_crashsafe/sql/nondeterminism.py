"""Find calls whose result differs between two attempts of the same task (now(), random(), ...).

A MERGE whose source reads the clock or a sequence writes different rows on a re-run, so a retry
is not a no-op. The SQL is read by sqlglot's tokenizer for the target's dialect, which knows that
dialect's comments (PostgreSQL nests ``/* */``, MySQL has ``#``), strings (``E'...'``, ``$tag$``,
MySQL's ``"..."`` and backslash escapes) and quoted names (``"now"()`` *is* a call to now() in
PostgreSQL, ``"now"`` alone is a column). Tokens, not a full parse, because the SQL may still hold
Jinja (``{{ ds }}``) or vendor syntax a parser refuses, and a refused parse must not let a
``now()`` through. What counts:

* a call to a listed function, quoted or schema-qualified (``pg_catalog."random"()``);
* an SQL time keyword (``current_timestamp``, ``localtime``, ...), with or without parentheses;
* in PostgreSQL, a string it reads as "this moment" (``'now'``, ``'today'``, ``'yesterday'``,
  ``'tomorrow'``) anywhere: as ``'today'::date``, ``CAST('yesterday' AS date)``, or a plain
  ``'today'`` that an INSERT casts into a date column unseen; SQLite's ``datetime('now')`` and
  ``date()``, MySQL's ``UNIX_TIMESTAMP()``;
* ``TABLESAMPLE`` without ``REPEATABLE (seed)``, which samples other rows on every attempt.

``pg_sleep`` is slow, not non-deterministic.
"""

from __future__ import annotations

import re

from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from airflow_crashsafe.errors import ConfigurationError

__all__ = [
    "DIALECTS",
    "NONDETERMINISTIC_FUNCTIONS",
    "NONDETERMINISTIC_KEYWORDS",
    "NOW_LITERALS",
    "find_nondeterministic",
    "strip_sql",
]

#: The dialects the check reads, by sqlglot name; crashsafe's own names map onto them.
DIALECTS = ("postgres", "sqlite", "mysql")
_ALIASES = {"postgresql": "postgres", "mariadb": "mysql"}

#: Functions that return something new on every call, in any of :data:`DIALECTS` (PostgreSQL with
#: uuid-ossp/pgcrypto, SQLite, MySQL/MariaDB). One list for all: a user function named ``rand``
#: on PostgreSQL is rarer than a MySQL habit in a PostgreSQL query.
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
    "uuidv4",
    "uuidv7",
    "txid_current",
    "pg_current_xact_id",
    "randomblob",
    "changes",
    "last_insert_rowid",
    "rand",
    "uuid",
    "uuid_short",
    "uuid_v4",
    "uuid_v7",
    "sysdate",
    "curdate",
    "curtime",
    "utc_timestamp",
    "utc_date",
    "utc_time",
    "last_insert_id",
    "connection_id",
)

#: SQL-standard time keywords, non-deterministic with or without parentheses.
NONDETERMINISTIC_KEYWORDS = (
    "current_timestamp",
    "current_date",
    "current_time",
    "localtimestamp",
    "localtime",
)

#: Strings a date/time type reads as "this moment" (PostgreSQL's special date/time inputs).
NOW_LITERALS = ("now", "today", "yesterday", "tomorrow")

# Date/time functions with a 'now' argument (SQLite), or with no argument at all (SQLite's
# date() is today; MySQL's UNIX_TIMESTAMP() is this second, UNIX_TIMESTAMP(col) is not).
_TIME_FUNCTIONS = ("date", "time", "datetime", "julianday", "unixepoch", "strftime", "timediff")
_NOARG_NOW = ("date", "time", "datetime", "julianday", "unixepoch", "unix_timestamp")

# What the dialects lex differently: quotes, MySQL's # comments and backslash escapes,
# PostgreSQL's $tag$ strings and nested /* */ (a /* before the */ of another), MySQL's "--"
# needing a space. SQL with none of them gives every dialect the same tokens, so reading it once
# (as PostgreSQL) is enough.
_LEXED_APART = re.compile(r"[\"`#\\$]|/\*(?:(?!\*/).)*?/\*|--\S", re.DOTALL)

_STRINGS = {
    TokenType.STRING,
    TokenType.BYTE_STRING,  # PostgreSQL's E'...'
    TokenType.HEREDOC_STRING,  # PostgreSQL's $tag$...$tag$
    TokenType.NATIONAL_STRING,
    TokenType.RAW_STRING,
    TokenType.UNICODE_STRING,
}


def _dialects(dialect: str | None) -> tuple[str, ...]:
    if dialect is None:
        return DIALECTS
    name = _ALIASES.get(dialect.lower(), dialect.lower())
    if name not in DIALECTS:
        raise ConfigurationError(
            f"Cannot check SQL for non-deterministic calls in dialect {dialect!r}: "
            f"use one of {list(DIALECTS)}."
        )
    return (name,)


def _tokens(sql: str, dialect: str) -> list[Token]:
    return Dialect.get_or_raise(dialect).tokenize(sql)


def _word(tok: Token) -> str | None:
    """The lower-case name a token spells, if it is a name or keyword (quoted names included)."""
    if tok.token_type in _STRINGS:
        return None
    if tok.token_type == TokenType.IDENTIFIER or tok.text.replace("_", "a").isalnum():
        return tok.text.lower()
    return None


def _close(tokens: list[Token], open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at`` (or past the end)."""
    depth = 0
    for j in range(open_at, len(tokens)):
        if tokens[j].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[j].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return j
    return len(tokens)


def _is_now(tok: Token) -> bool:
    return tok.token_type in _STRINGS and tok.text.strip().lower() in NOW_LITERALS


def _sample_is_seeded(tokens: list[Token], at: int) -> bool:
    """``TABLESAMPLE method (n) REPEATABLE (seed)`` picks the same rows again; without it, not."""
    j = at + 1
    while j < len(tokens) and tokens[j].token_type != TokenType.L_PAREN:
        j += 1
    j = _close(tokens, j) + 1
    return j < len(tokens) and tokens[j].text.lower() in ("repeatable", "seed")


def _scan(tokens: list[Token], dialect: str) -> list[tuple[int, str]]:
    bare_now = dialect == "postgres"  # only PostgreSQL casts a plain 'today' to a date
    found: list[tuple[int, str]] = []
    counted: set[int] = set()  # 'now' strings already named as a time function's argument
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        call = nxt is not None and nxt.token_type == TokenType.L_PAREN
        after_dot = i > 0 and tokens[i - 1].token_type == TokenType.DOT
        name = _word(tok)
        if tok.token_type == TokenType.TABLE_SAMPLE:
            if not _sample_is_seeded(tokens, i):
                found.append((tok.start, "tablesample"))
        elif _is_now(tok):
            if bare_now and i not in counted:
                found.append((tok.start, f"'{tok.text.strip().lower()}'"))
        elif name is None:
            continue
        elif call and name in NONDETERMINISTIC_FUNCTIONS:
            found.append((tok.start, f"{name}()"))
        elif tok.token_type != TokenType.IDENTIFIER and not after_dot and name in NONDETERMINISTIC_KEYWORDS:
            found.append((tok.start, name))
        elif call and name in _TIME_FUNCTIONS + _NOARG_NOW and not after_dot:
            end = _close(tokens, i + 1)
            if end == i + 2 and name in _NOARG_NOW:
                found.append((tok.start, f"{name}()"))
                continue
            args = [j for j in range(i + 2, min(end, len(tokens))) if _is_now(tokens[j])]
            if args and name in _TIME_FUNCTIONS:
                found.append((tok.start, f"{name}('{tokens[args[0]].text.strip().lower()}')"))
                counted.update(args)
    return found


def find_nondeterministic(sql: str, dialect: str | None = "postgres") -> list[str]:
    """The non-deterministic calls in ``sql``, in order of first appearance, e.g. ``["now()"]``.

    ``dialect`` is a sqlglot dialect name of :data:`DIALECTS` (``postgresql`` and ``mariadb`` are
    accepted too); ``None`` when the target is not known yet reads the SQL in every one of them and
    names what any of them finds. SQL no dialect can tokenize (an unterminated string) raises
    :class:`~airflow_crashsafe.errors.ConfigurationError`.
    """
    dialects = _dialects(dialect)
    if dialect is None and not _LEXED_APART.search(sql):
        dialects = ("postgres",)  # the others would read the same tokens, and PostgreSQL finds most
    found: list[tuple[int, str]] = []
    errors: list[str] = []
    for name in dialects:
        try:
            found += _scan(_tokens(sql, name), name)
        except TokenError as exc:
            errors.append(f"{name}: {exc}")
    if len(errors) == len(dialects):
        raise ConfigurationError(
            f"Cannot read this SQL to check it for now(), random() and the like ({'; '.join(errors)}). "
            "Fix its quoting (an unterminated string or quoted name)."
        )
    names: list[str] = []
    for _, what in sorted(found):
        if what not in names:
            names.append(what)
    return names


def strip_sql(sql: str, dialect: str = "postgres") -> str:
    """``sql`` without comments, strings blanked (a "now" one kept) and quoted names as ``_``.

    Rebuilt from the dialect's tokens: the text between two tokens is only whitespace and comments,
    so each comment in it becomes one space and the whitespace stays.
    """
    name = _dialects(dialect)[0]
    out: list[str] = []
    pos = 0
    for tok in _tokens(sql, name):
        out.append(_blank_comments(sql[pos : tok.start], nested=name == "postgres"))
        if tok.token_type in _STRINGS:
            out.append(f"'{tok.text.strip().lower()}'" if _is_now(tok) else "''")
        elif tok.token_type == TokenType.IDENTIFIER:
            out.append(" _ ")
        else:
            out.append(sql[tok.start : tok.end + 1])
        pos = tok.end + 1
    out.append(_blank_comments(sql[pos:], nested=name == "postgres"))
    return "".join(out)


def _blank_comments(gap: str, *, nested: bool) -> str:
    """Whitespace kept, each comment one space (PostgreSQL nests ``/* */``, the others do not)."""
    out: list[str] = []
    i = 0
    while i < len(gap):
        if gap[i].isspace():
            out.append(gap[i])
            i += 1
            continue
        out.append(" ")
        if not gap.startswith("/*", i):  # -- or #: up to the line break
            nl = gap.find("\n", i)
            i = len(gap) if nl < 0 else nl
            continue
        depth, i = 1, i + 2
        while i < len(gap) and depth:
            if nested and gap.startswith("/*", i):
                depth, i = depth + 1, i + 2
            elif gap.startswith("*/", i):
                depth, i = depth - 1, i + 2
            else:
                i += 1
    return "".join(out)
