"""Secrets in free text: error messages, text responses, log lines, every string of a JSON value.

One pass per shape, in this order (each sees what the ones before it left): database passwords
in every form libpq accepts, and the pieces libpq's errors quote (:mod:`airflow_crashsafe.dsn`,
first, so that no other rule cuts an error's quote apart); PEM private keys;
URLs (password or token-like user before ``@``, query string, a fragment holding ``=``, path
segments that carry tokens); paths in text; ``Digest`` parameters; the credential after an
authorization scheme; token formats (and an AWS secret key beside an access key id); base64 runs
whose decoded text holds a secret or a ``user:password``; XML elements and ``key``/``value``
attributes named like secrets; header lines; ``name=value`` / ``name: value`` / ``name => value``
pairs; command-line flags (``--password x``, ``-p x``, ``-u user:x``); a quoted value after a
secret word in prose (``the password is 'x'``); ``;``-separated connection-string pairs; and
finally all of these inside the URL-decoded text, masked in every encoding.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus

from airflow_crashsafe.dsn import mask_dsn_text
from airflow_crashsafe.secret_shapes.formats import AWS_KEY_ID, AWS_SECRET, PRIVATE_KEY, TOKENS
from airflow_crashsafe.secret_shapes.found import MASK, Found, NameCheck
from airflow_crashsafe.secret_shapes.names import name_is_secret
from airflow_crashsafe.secret_shapes.paths import OPAQUE_RUN, is_plain, mask_path

__all__ = ["basic_password", "mask_text", "suspect"]

#: Text holds nothing any rule below could mask unless it has one of these characters, a word
#: of 16 characters or more (every token format is that long), or one of :data:`_SUSPECT_WORDS`.
_SUSPECT_CHARS = re.compile(r"[=:%;<]|/[^/\s]*/")  # one slash is a fraction or a version, two a path
_SUSPECT_WORDS = ("bearer", "basic", "token", "digest", "negotiate", "ntlm", "ssws", "pass", "secret")
_URL = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>[^\s\"'<>\\`;]+)")
_URL_PARTS = re.compile(
    r"(?P<auth>[^/?#]*)(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?(?:#(?P<frag>.*))?", re.DOTALL
)
_PATH = re.compile(r"(?<![\w.:/%@*-])(?:/[^\s/\"'<>?#\\`]+){2,}")
_SCHEME = re.compile(
    r"\b(?P<scheme>bearer|basic|token|negotiate|ntlm|ssws)[ \t]+(?P<cred>[A-Za-z0-9._~+/=:-]+)", re.IGNORECASE
)
_DIGEST_PARAM = r"[\w-]+=(?:\"[^\"\r\n]{0,500}\"|[^\s,\"]+)"
_DIGEST = re.compile(
    rf"\bDigest[ \t]+(?P<params>{_DIGEST_PARAM}(?:[ \t]*,[ \t]*{_DIGEST_PARAM})*)", re.IGNORECASE
)
_B64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_USER_PASSWORD = re.compile(r"[^\s:]{1,128}:\S{4,}")
_XML_ELEMENT = re.compile(
    r"<(?P<tag>[A-Za-z_][\w:.-]{0,63})(?:\s[^<>]{0,500})?>(?P<value>[^<]{1,2000})</(?P=tag)\s*>"
)
_XML_KEY_VALUE = re.compile(
    r"\b(?:key|name)\s*=\s*\"(?P<name>[^\"]{1,100})\"\s+value\s*=\s*\"(?P<value>[^\"]{0,2000})\""
)
_HEADER = re.compile(r"^[ \t]*(?P<name>[A-Za-z][\w-]{0,63})[ \t]*:[ \t]*(?P<value>[^\r\n]+)", re.MULTILINE)
_KEY = re.compile(
    r"(?<![\w.])(?P<key>[A-Za-z_][\w.-]{0,63})(?P<quote>\\?[\"'])?[ \t]*(?:=>|[:=])(?![=/])[ \t]*"
)
_BARE = re.compile(r"(?:(?:bearer|basic|token|digest)[ \t]+)?[^\s\"'&;<>\\]+", re.IGNORECASE)
_FLAG = re.compile(
    r"(?<![\w-])-{1,2}(?P<flag>[A-Za-z][\w-]{0,40})(?:[ \t]+|=)"
    r"(?P<value>\"[^\"\r\n]{0,500}\"|'[^'\r\n]{0,500}'|[^\s\"'-][^\s\"']*)"
)
_SAID = re.compile(
    r"\b(?:password|passwd|passphrase|pwd|secret|token|api[ _-]?key)"
    r"(?:[ \t]+(?:is|was|of|to|set[ \t]+to|=|:))*[ \t]+"
    r"(?P<value>\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}'|[^\s\"'.,;:)]*\d[^\s\"',;)]*)",
    re.IGNORECASE,
)
_CONN = re.compile(
    r"(?:^|(?<=;))[ \t]*(?P<key>[A-Za-z][\w .-]{0,40}?)[ \t]*=(?P<value>[^;\r\n]*)", re.MULTILINE
)
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_LONGEST_QUOTED = 2000


def mask_text(text: str, found: Found | None = None, names: NameCheck = name_is_secret) -> str:
    """``text`` with every secret shape masked; what was masked is added to ``found``."""
    if not suspect(text):
        return text
    return _scan(text, found if found is not None else Found(), names, nested=False)


def suspect(text: str) -> bool:
    """False when no rule could mask anything in ``text`` (the common case, decided cheaply)."""
    if _SUSPECT_CHARS.search(text) is not None:
        return True
    lowered = text.lower()
    for word in _SUSPECT_WORDS:
        if word in lowered:
            return True
    return len(text) >= 16 and any(len(word) >= 16 for word in text.split())


def _scan(text: str, found: Found, names: NameCheck, *, nested: bool) -> str:
    if "=" in text or "://" in text or '"' in text:
        text = _libpq(text, found, names)
    if "-----BEGIN" in text:
        text = PRIVATE_KEY.sub(lambda m: _masked(m, "body", found), text)
    if "://" in text:
        text = _URL.sub(lambda m: _url(m, found, names), text)
    if "/" in text:
        text = _PATH.sub(lambda m: mask_path(m[0], found, names), text)
    text = _DIGEST.sub(lambda m: _masked(m, "params", found), text)
    text = _SCHEME.sub(lambda m: _scheme(m, found), text)
    aws_key_id = AWS_KEY_ID.search(text) is not None  # its secret key may sit beside it
    text = TOKENS.sub(lambda m: _masked(m, 0, found), text)
    if aws_key_id:
        text = AWS_SECRET.sub(lambda m: _aws_secret(m, found), text)
    if not nested:
        text = _B64.sub(lambda m: _base64(m, found, names), text)
    if "<" in text:
        text = _XML_ELEMENT.sub(lambda m: _named(m, m["tag"].rpartition(":")[2], found, names), text)
        text = _XML_KEY_VALUE.sub(lambda m: _named(m, m["name"], found, names), text)
    if ":" in text:
        text = _HEADER.sub(lambda m: _named(m, m["name"], found, names), text)
    if ":" in text or "=" in text:
        text = _pairs(text, found, names)
    if "-" in text:
        text = _FLAG.sub(lambda m: _flag(m, found, names), text)
    text = _SAID.sub(lambda m: _masked(m, "value", found, quoted=True), text)
    if ";" in text:
        text = _CONN.sub(lambda m: _named(m, m["key"].strip(), found, names), text)
    if not nested and _PERCENT.search(text):
        text = _percent_encoded(text, found, names)
    return text


def _libpq(text: str, found: Found, names: NameCheck) -> str:
    """Database passwords in every form libpq accepts, and what libpq's errors quote back."""
    masked = mask_dsn_text(text)
    if masked != text:
        _pairs(text, found, names)  # what was masked, for the caller to know (the text is done)
    return masked


def _masked(match: re.Match[str], group: int | str, found: Found, *, quoted: bool = False) -> str:
    """The match with ``group`` masked (inside its quotes, if ``quoted`` and it has them)."""
    start, end = match.start(group), match.end(group)
    if quoted and end - start >= 2 and match[group][0] in "\"'" and match[group][-1] == match[group][0]:
        start, end = start + 1, end - 1
    value = match.string[start:end]
    if _done(value):
        return match[0]
    found.add(value)
    return match[0][: start - match.start()] + MASK + match[0][end - match.start() :]


def _done(value: str) -> bool:
    """True when nothing is left to mask: empty, or already the mask (and punctuation)."""
    return value.strip().rstrip(",.:;)]}") in ("", MASK)


def _named(match: re.Match[str], name: str, found: Found, names: NameCheck) -> str:
    return _masked(match, "value", found, quoted=True) if names(name) else match[0]


def _url(match: re.Match[str], found: Found, names: NameCheck) -> str:
    parts = _URL_PARTS.fullmatch(match["rest"])
    if parts is None:  # pragma: no cover - the pattern matches any text
        return match[0]
    auth = parts["auth"]
    if "@" in auth:
        userinfo, _, host = auth.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and password not in ("", MASK):
            found.add(unquote(password))
            found.add(password)
            userinfo = f"{user}:{MASK}"
        elif not colon and (len(user) >= OPAQUE_RUN or not is_plain(unquote(user))):
            found.add(unquote(user))
            userinfo = MASK
        auth = f"{userinfo}@{host}"
    url = f"{match['scheme']}://{auth}{mask_path(parts['path'], found, names)}"
    for mark, part in (("?", parts["query"]), ("#", parts["frag"])):
        if part is None:
            continue
        if part in ("", MASK) or (mark == "#" and "=" not in part):
            url += mark + part
            continue
        for key, value in parse_qsl(part, keep_blank_values=True):
            if names(key):
                found.add(value)
            else:
                mask_text(value, found, names)
        url += mark + MASK
    return url


def _scheme(match: re.Match[str], found: Found) -> str:
    """``Bearer x`` always; another scheme's credential when it is not a plain lowercase word."""
    cred, scheme = match["cred"], match["scheme"].lower()
    if scheme != "bearer" and (len(cred) < 6 or (cred.isalpha() and cred.islower())):
        return match[0]
    if scheme == "basic":
        found.add(basic_password(cred))
    return _masked(match, "cred", found)


def basic_password(credential: str) -> str:
    """The password inside a Basic credential (base64 of ``user:password``), or ''."""
    decoded = _decoded(credential)
    return decoded.partition(":")[2] if decoded else ""


def _aws_secret(match: re.Match[str], found: Found) -> str:
    run = match[0]
    classes = sum(any(test(c) for c in run) for test in (str.isupper, str.islower, str.isdigit))
    return _masked(match, 0, found) if classes >= 2 else run


def _decoded(run: str) -> str | None:
    """``run`` decoded from (URL-safe) base64 when that gives printable text, else None."""
    core = run.rstrip("=")
    if len(core) % 4 == 1 or len(core) > 65536:
        return None
    altchars = b"-_" if ("-" in core or "_" in core) else None
    try:
        raw = base64.b64decode(core + "=" * (-len(core) % 4), altchars=altchars, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return text if text and all(c.isprintable() or c in "\r\n\t" for c in text) else None


def _base64(match: re.Match[str], found: Found, names: NameCheck) -> str:
    """A base64 run whose decoded text holds a secret shape or is a ``user:password``."""
    decoded = _decoded(match[0])
    if decoded is None:
        return match[0]
    inner = Found()
    _scan(decoded, inner, names, nested=True)
    user_password = _USER_PASSWORD.fullmatch(decoded.strip()) is not None
    if not (inner.credentials or inner.opaque or user_password):
        return match[0]
    found.merge(inner)
    if user_password:
        found.add(decoded.partition(":")[2])
    return _masked(match, 0, found)


def _pairs(text: str, found: Found, names: NameCheck) -> str:
    """Mask the value of every ``name=value`` / ``name: value`` whose name is secret."""
    out, pos = [], 0
    for match in _KEY.finditer(text):
        if match.start() < pos or not names(match["key"]):
            continue
        start, end = _value_span(text, match.end())
        value = text[start:end]
        bare_word = start == match.end() and value.isalpha()  # not quoted, and only letters
        if _done(value) or (match["quote"] and bare_word):
            continue  # a quoted name before a bare word is prose or a literal: 'sink': Invalid, "pwd": null
        found.add(value)
        if " " in value.strip():
            found.add(value.split()[-1])
        out += [text[pos:start], MASK]
        pos = end
    return "".join(out) + text[pos:] if out else text


def _value_span(text: str, start: int) -> tuple[int, int]:
    """Where the value starting at ``start`` lies: up to its closing quote, or a bare word."""
    for quote_mark in ('\\"', "\\'", '"', "'"):
        if text.startswith(quote_mark, start):
            begin = start + len(quote_mark)
            line_end = text.find("\n", begin)
            limit = min(line_end if line_end >= 0 else len(text), begin + _LONGEST_QUOTED)
            close = text.find(quote_mark, begin, limit)
            return begin, close if close >= 0 else limit
    bare = _BARE.match(text, start)
    if bare is None:
        return start, start
    return start, start + len(bare[0].rstrip(",.:)]}"))  # the sentence's punctuation, not the value's


def _flag(match: re.Match[str], found: Found, names: NameCheck) -> str:
    """``--password x``, ``--api-key=x``, ``-p x``; and the password of ``-u user:x``."""
    flag, value = match["flag"], match["value"]
    if flag == "p" or names(flag):
        return _masked(match, "value", found, quoted=True)
    user, colon, password = value.strip("\"'").partition(":")
    if flag in ("u", "user") and colon and password and not password.startswith(MASK):
        found.add(password)
        return match[0].replace(f"{user}:{password}", f"{user}:{MASK}")
    return match[0]


def _percent_encoded(text: str, found: Found, names: NameCheck) -> str:
    """Secrets that only show once ``text`` is URL-decoded, masked in every encoding."""
    inner = Found()
    _scan(unquote_plus(text), inner, names, nested=True)
    for secret in sorted(inner.credentials | inner.opaque, key=len, reverse=True):
        if len(secret) < 4:
            continue
        for form in (quote(secret, safe=""), quote_plus(secret), quote(secret), secret):
            text = text.replace(form, MASK)
    found.merge(inner)
    return text
