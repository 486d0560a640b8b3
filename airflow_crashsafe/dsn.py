"""Database URLs and libpq connection strings without their passwords, for logs, alerts and errors.

A metadata-DB or store address reaches people in many places (the watchdog's "watching …" line,
``db_unreachable`` alerts, the doctor's findings, store errors); its password must reach none of
them, in any form libpq accepts:

- a URL's userinfo, ``postgresql://user:pw@host/db`` (also ``postgres://``, SQLAlchemy's
  ``postgresql+psycopg2://``, and a percent-encoded ``p%40ss``);
- a URL's query, ``?password=pw`` / ``&sslpassword=pw`` (keys percent-decoded, as libpq does);
- a keyword/value string, ``host=h password=pw`` and ``password='se cret'`` (a bare
  ``password=se cret`` is taken to run up to the next ``key=``: libpq would reject its tail, and
  quote that tail back in its error);
- libpq's own errors, which quote pieces of the string they could not parse (``missing "=" after
  "cret"``, ``invalid percent-encoded token: "p%zz"``, a whole malformed URI): those quotes are
  masked, and so is every secret of the string the caller names, wherever it appears.

``passfile`` names a file and is shown; what the file holds is never read here. Imports nothing
beyond the standard library: the watchdog, the doctor and :mod:`airflow_crashsafe.redaction` call it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["MASK", "dsn_secrets", "mask_dsn_text", "safe_db_url"]

MASK = "***"
#: libpq's keywords whose values are secrets (``passfile`` is a path, not one).
SECRET_KEYWORDS = frozenset({"password", "sslpassword"})
#: A secret (or a whitespace-separated piece of one) shorter than this is not searched for in free
#: text, where it would mask unrelated words; the patterns below still mask it where it stands.
MIN_PIECE = 4

_USERINFO = re.compile(
    r"(?P<head>\b[a-z][a-z0-9+.-]*://[^\s/?#@:\"'<>]*):(?P<secret>[^\s\"'<>?#]*)@", re.IGNORECASE
)
_QUERY_PAIR = re.compile(r"(?P<head>[?&](?P<key>[^=&#\s\"'<>?]+)=)(?P<secret>[^&#\s\"'<>]*)")
_KEYWORD = r"(?P<head>(?<![\w%?&.-])(?P<key>[A-Za-z_]+)\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'?|{bare})"
#: In a connection string a bare value runs to the next blank (libpq's rule); in free text it also
#: stops at the punctuation that ends a value in prose (``password=x, then``), as redaction's pairs do.
_KEYWORD_PAIR = re.compile(_KEYWORD.format(bare=r"[^\s'\"]*"))
_TEXT_KEYWORD_PAIR = re.compile(_KEYWORD.format(bare=r"[^\s'\"&,;)}\]]*"))
#: libpq errors that quote what they could not parse: the quoted part is masked.
_LIBPQ_QUOTE = re.compile(
    r"(?P<head>missing \"=\" after |percent-encoded (?:token|value): |in URI(?: query parameter"
    r"| \(expected \":\" or \"/\"\))?: |parser routine: |invalid URI query parameter: )\"[^\"\n]*\""
)
_BARE_TAIL = re.compile(r"(?:\s+[^\s='\"]+(?=\s|$))+")


def _is_secret_key(key: str) -> bool:
    return unquote(key).strip().lower() in SECRET_KEYWORDS


def _keyword_value(raw: str) -> str:
    """A keyword/value string's value as libpq reads it: quotes removed, backslash escapes resolved."""
    if raw.startswith("'"):
        raw = raw[1:-1] if len(raw) > 1 and raw.endswith("'") else raw[1:]
    return re.sub(r"\\(.)", r"\1", raw)


def _mask_keywords(text: str, *, bare_tails: bool) -> str:
    """Keyword/value secrets masked; ``bare_tails`` (a whole connection string): libpq's rules."""
    out, last = [], 0
    for match in (_KEYWORD_PAIR if bare_tails else _TEXT_KEYWORD_PAIR).finditer(text):
        if not _is_secret_key(match.group("key")):
            continue
        end = match.end()
        if bare_tails and not match.group("secret").startswith("'"):
            tail = _BARE_TAIL.match(text, end)
            end = tail.end() if tail else end
        out += [text[last : match.start()], match.group("head"), MASK]
        last = end
    return "".join(out) + text[last:]


def _mask_patterns(text: str, *, bare_tails: bool) -> str:
    text = _USERINFO.sub(lambda m: f"{m.group('head')}:{MASK}@", text)
    text = _QUERY_PAIR.sub(
        lambda m: f"{m.group('head')}{MASK}" if _is_secret_key(m.group("key")) else m.group(0), text
    )
    text = _mask_keywords(text, bare_tails=bare_tails)
    return _LIBPQ_QUOTE.sub(lambda m: f'{m.group("head")}"{MASK}"', text)


def safe_db_url(url: str) -> str:
    """``url`` (a URL or a libpq keyword/value string) with every password masked."""
    return _mask_patterns(url, bare_tails=True)


def dsn_secrets(dsn: str) -> set[str]:
    """The passwords in ``dsn`` as written, percent-decoded and unquoted, and their pieces."""
    found: set[str] = set()
    for match in _USERINFO.finditer(dsn):
        found |= {match.group("secret"), unquote(match.group("secret"))}
    for match in _QUERY_PAIR.finditer(dsn):
        if _is_secret_key(match.group("key")):
            found |= {match.group("secret"), unquote(match.group("secret"))}
    for match in _KEYWORD_PAIR.finditer(dsn):
        if _is_secret_key(match.group("key")):
            raw = match.group("secret")
            tail = _BARE_TAIL.match(dsn, match.end()) if not raw.startswith("'") else None
            found |= {raw, _keyword_value(raw)}
            if tail:  # a bare value with spaces: libpq quotes its tail back (``missing "=" after``)
                found |= {raw + tail.group(0), tail.group(0).strip()}
    pieces = {piece for secret in found for piece in secret.split()}
    return {s for s in found | pieces if len(s) >= MIN_PIECE and s != MASK}


def mask_dsn_text(text: str, *dsns: str | None) -> str:
    """Free text (an error, a log line) with every password of ``dsns`` masked wherever it appears,
    and every URL, keyword/value or libpq-quoted secret masked by its shape."""
    known = {secret for dsn in dsns if dsn for secret in dsn_secrets(dsn)}
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _mask_patterns(text, bare_tails=False)
