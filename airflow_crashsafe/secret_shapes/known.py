"""Secret values a call is known to hold, found again wherever a text quotes them, in any encoding.

A credential the redaction policy masked in one place (a header, a secret-named field, a token in
the URL path) can come back anywhere else: quoted bare by an exception, echoed by the vendor,
URL-encoded in a log line, JSON-escaped inside a string, or base64-encoded inside an echoed
``Authorization: Basic`` value. :class:`KnownSecrets` matches all of those forms in one pass:
the plain forms exactly, and the base64 forms by the characters that encode only the secret's
own bytes (at each of the three alignments base64 can start at), masking the whole base64 run
they sit in.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from airflow_crashsafe.secret_shapes.found import MASK

__all__ = ["KnownSecrets", "base64_cores"]

#: Base64 forms are searched for only for secrets this long (shorter ones collide with text).
MIN_ENCODED = 8
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-")


class KnownSecrets:
    """A compiled matcher for a set of secret values and their encoded forms."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = frozenset(secrets)
        self.plain_forms = frozenset(form for s in self.secrets for form in _plain_forms(s))
        cores = {core for s in self.secrets if len(s) >= MIN_ENCODED for core in base64_cores(s)}
        self._plain = _alternation(self.plain_forms)
        self._base64 = _alternation(cores)
        self._any = _alternation(self.plain_forms | cores)

    def scrub(self, text: str) -> str:
        """``text`` with every form of every known secret masked."""
        if self._any is None or self._any.search(text) is None:  # the common case: one search
            return text
        if self._plain is not None:
            text = self._plain.sub(MASK, text)
        if self._base64 is None:
            return text
        out, pos = [], 0
        for match in self._base64.finditer(text):
            if match.start() < pos:
                continue
            start, end = match.start(), match.end()
            while start > pos and text[start - 1] in _BASE64_CHARS:
                start -= 1
            while end < len(text) and text[end] in _BASE64_CHARS:
                end += 1
            out += [text[pos:start], MASK]
            pos = end
        return "".join(out) + text[pos:] if out else text


def _plain_forms(secret: str) -> set[str]:
    """The secret as written, URL-encoded (both ways) and JSON-escaped."""
    return {secret, quote(secret, safe=""), quote(secret), quote_plus(secret), json.dumps(secret)[1:-1]}


def base64_cores(secret: str) -> set[str]:
    """The base64 characters that encode only ``secret``'s bytes, at each alignment, both alphabets.

    Whatever precedes the secret inside the encoded value (``user:`` in a Basic credential), one
    of the three alignments matches, and these characters appear in the encoding unchanged.
    """
    raw = secret.encode()
    cores = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        first, last = math.ceil(offset * 8 / 6), (offset + len(raw)) * 8 // 6
        core = encoded[first:last]
        if len(core) >= MIN_ENCODED:
            cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


def _alternation(forms: Iterable[str]) -> re.Pattern[str] | None:
    """One pattern matching any of ``forms``, longest first (a URL before its parts)."""
    ordered = sorted({f for f in forms if f}, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None
