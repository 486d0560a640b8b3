"""URL path segments that carry tokens.

Telegram's ``/bot<token>/``; Slack's ``/services/T…/B…/<secret>``; any segment after ``hooks`` or
``webhooks`` (Discord, Teams, Zapier, Mattermost) that is not a plain word or number; the
segment after one named like a secret (``/key/<k>``, ``/tokens/<t>``); one holding a known token
format; and anywhere, a segment with a run of 16 or more characters that reads as random. That
last kind is *opaque*: it may be an id rather than a credential, so the ledger keeps its digest.
Readable segments stay: words, CamelWords, numbers, dates, ``v2``, UUIDs, Airflow run ids.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from airflow_crashsafe.secret_shapes.formats import TOKENS
from airflow_crashsafe.secret_shapes.found import MASK, Found, NameCheck
from airflow_crashsafe.secret_shapes.names import name_is_secret

__all__ = ["OPAQUE_RUN", "is_plain", "mask_path"]

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PIECES = re.compile(r"[-_.~:+=,;@!$ ]+")
#: A readable piece of a path segment: a word, CamelWords, an acronym, a number, ``v2``, ``01T00``.
_WORDISH = re.compile(
    r"[a-z]+(?:[A-Z][a-z]+)*|[A-Z]{0,6}(?:[A-Z][a-z]+)*|\d+|[A-Za-z]{1,4}\d{1,4}|\d{1,4}[A-Za-z]{1,3}\d{0,4}"
)
#: A piece at least this long that is not readable is taken for a token (or an opaque id).
OPAQUE_RUN = 16
_WEBHOOK_WORDS = frozenset(
    {"hook", "hooks", "webhook", "webhooks", "webhookb2", "incomingwebhook", "catch", "trigger", "triggers"}
)
_PATH_SECRET_WORDS = frozenset({"key", "keys", "token", "tokens", "secret", "sig", "apikey", "password"})
_TELEGRAM = re.compile(r"bot(?P<token>.{6,})", re.DOTALL)
_SLACK_TEAM, _SLACK_CHANNEL = re.compile(r"T[A-Z0-9_]+"), re.compile(r"B[A-Z0-9_]+")


def is_plain(raw: str) -> bool:
    """True when ``raw`` reads as words, numbers or a UUID, not as a token."""
    return _UUID.fullmatch(raw) is not None or all(_WORDISH.fullmatch(p) for p in _PIECES.split(raw))


def _opaque(raw: str) -> bool:
    return any(len(p) >= OPAQUE_RUN and not _WORDISH.fullmatch(p) for p in _PIECES.split(raw))


def _token_like(raw: str) -> bool:
    """Loosely a token, where the path already says one follows (after ``webhooks``, ``key``)."""
    if len(raw) < 6 or raw.isdigit():
        return False
    return not is_plain(raw) or (any(c.isdigit() for c in raw) and any(c.isalpha() for c in raw))


def mask_path(path: str, found: Found | None = None, names: NameCheck = name_is_secret) -> str:
    """``path`` with the segments that carry a token, or read as random, masked."""
    segments = path.split("/")
    in_webhook = False
    for i, segment in enumerate(segments):
        raw = unquote(segment)
        kind = _segment_kind(segments, i, raw, in_webhook, names) if segment not in ("", MASK) else None
        in_webhook = in_webhook or raw.lower() in _WEBHOOK_WORDS
        if kind is None:
            continue
        telegram = _TELEGRAM.fullmatch(raw)
        segments[i] = f"bot{MASK}" if kind == "bot" else MASK
        if found is not None:
            found.add(telegram["token"] if kind == "bot" and telegram else raw, opaque=kind == "opaque")
            found.add(segment, opaque=kind == "opaque")
    return "/".join(segments)


def _segment_kind(segments: list[str], i: int, raw: str, in_webhook: bool, names: NameCheck) -> str | None:
    """What segment ``i`` carries: "bot" (Telegram), "credential", "opaque", or None (readable)."""
    telegram = _TELEGRAM.fullmatch(raw)
    if telegram and (":" in telegram["token"] or not is_plain(telegram["token"])):
        return "bot"
    if _slack_secret(segments, i) or TOKENS.search(raw):
        return "credential"
    before = unquote(segments[i - 1]) if i else ""
    if (in_webhook or before.lower() in _PATH_SECRET_WORDS or names(before)) and _token_like(raw):
        return "credential"
    return "opaque" if _opaque(raw) else None


def _slack_secret(segments: list[str], i: int) -> bool:
    """``/services/T…/B…/<secret>``: Slack's incoming-webhook path."""
    return (
        i >= 3
        and segments[i - 3].lower() == "services"
        and _SLACK_TEAM.fullmatch(segments[i - 2]) is not None
        and _SLACK_CHANNEL.fullmatch(segments[i - 1]) is not None
    )
