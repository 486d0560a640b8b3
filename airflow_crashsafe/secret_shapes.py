"""What a secret looks like: in a key's name, in free text, in a URL's path.

:mod:`airflow_crashsafe.redaction` decides where masking applies; this module only recognises.
Every rule errs toward "a secret": a value that looks like one is masked.

- **Names.** A key is split into words (``connectionString`` → connection string, ``X-Api-Key`` →
  x api key, ``DB_PWD`` → db pwd). It is secret when its letters hold a secret fragment
  (``password``, ``token``, ``secret``, ``jwt``, ``session``, ``webhook``, ``apikey`` …), one of
  its words is a secret word (``pwd``, ``pass``, ``sig``, ``pin``, ``auth`` …), or it ends in
  ``key`` after any word but a non-secret kind (``api_key``, ``AccountKey``, ``x-functions-key``
  are secret; ``idempotency_key``, ``sort_key``, ``public_key`` and a bare ``key`` are not).
- **Text.** PEM private-key blocks; the credential after an authorization scheme (``Bearer``,
  ``Basic``, ``Token``, ``Digest`` …); well-known token formats (JWTs, ``ghp_``, ``xoxb-``,
  ``AKIA…`` and a secret key beside it, ``sk_live_``, ``AIza…``, ``SG.``, ``npm_`` …);
  ``name=value`` / ``name: value`` pairs, header lines and ``;``-separated connection-string
  pairs whose name is secret; a base64 run whose decoded text holds any of these or a
  ``user:password``; all of these again inside URL-encoded text.
- **URLs** (with a scheme, or a path in text): the password or a token-like user before ``@``;
  the query string, and a fragment holding ``=``; path segments that carry tokens: Telegram's
  ``/bot<token>/``, Slack's ``/services/T…/B…/<secret>``, any segment after ``hooks`` or
  ``webhooks`` that is not a plain word or number, the segment after one named like a secret
  (``/key/<k>``), and anywhere a run of 16 or more characters that reads as random. That last
  one is *opaque*: it may be an id rather than a credential, so the ledger keeps its digest.

Patterns are compiled once and scan linearly; text without anything that could start a secret
costs one search (:data:`SUSPECT`). Nothing here imports Airflow.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus

__all__ = [
    "MASK",
    "SECRET_KEY_PATTERN",
    "SUSPECT",
    "Found",
    "key_words",
    "mask_path",
    "mask_text",
    "name_is_secret",
]

MASK = "***"
NameCheck = Callable[[str], bool]

# -- names ------------------------------------------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
_AIRFLOW_NORMAL = re.compile(r"\W+")
#: Secret fragments, searched in a name's words joined without separators (``clientsecret``).
SECRET_KEY_PATTERN = re.compile(
    r"pass(?:word|wd|phrase|code)|pwd|secret|token|auth(?!or)|apikey|accesskey|privatekey|privkey"
    r"|credential|private|cookie|session|signature|webhook|jwt|bearer|connectionstring|connstr"
)
_SECRET_WORDS = frozenset(
    {"pass", "pw", "pin", "sig", "sas", "otp", "totp", "mfa", "creds", "cred", "dsn", "sid"}
    | {"csrf", "xsrf", "cvv", "cvc", "saml", "salt", "hmac", "psk", "mnemonic", "seed", "nonce"}
)
#: Kinds of key that name a place, not a credential: ``sort_key``, ``idempotency_key``.
_PLAIN_KEY_KINDS = frozenset(
    {"idempotency", "idem", "object", "partition", "sort", "row", "foreign", "cache", "dedup"}
    | {"dedupe", "group", "lookup", "index", "join", "hash", "map", "message", "s3", "file", "blob"}
    | {"natural", "surrogate", "composite", "unique", "business", "shard", "sequence", "record"}
    | {"entity", "resource", "item", "event", "metric", "label", "tag", "range", "bucket", "public"}
    | {"column", "field", "dict", "name", "cluster", "distribution", "order", "translation"}
)
#: ``accountkey``, ``sharedaccesskey``: a secret ``key`` written without separators.
_SECRET_KEY_KINDS = (
    "api access account secret private signing encryption master app subscription function functions "
    "client license auth service admin storage ssh consumer integration routing host developer user root"
)
_SECRET_KEY_SUFFIXES = tuple(f"{kind}{key}" for kind in _SECRET_KEY_KINDS.split() for key in ("key", "keys"))


def key_words(name: str) -> list[str]:
    """The words of a key, whatever its case style: ``XApiKey`` and ``x-api-key`` are x, api, key."""
    return [w for w in _NOT_ALNUM.split(_CAMEL.sub("_", name.strip()).lower()) if w]


@functools.lru_cache(maxsize=8192)
def name_is_secret(name: str, sensitive: frozenset[str] = frozenset()) -> bool:
    """True when a value under ``name`` is a secret; ``sensitive``: names matched as Airflow does."""
    words = key_words(name)
    if not words:
        return False
    compact = "".join(words)
    if SECRET_KEY_PATTERN.search(compact) or compact.endswith(_SECRET_KEY_SUFFIXES):
        return True
    if not _SECRET_WORDS.isdisjoint(words):
        return True
    if words[-1] in ("key", "keys") and len(words) > 1 and words[-2] not in _PLAIN_KEY_KINDS:
        return True
    snake, legacy = "_".join(words), _AIRFLOW_NORMAL.sub("_", name.strip().lower())
    return any(s in snake or s in legacy for s in sensitive)


@dataclass
class Found:
    """What a scan masked: credentials, and opaque path runs (maybe ids) kept apart."""

    credentials: set[str] = field(default_factory=set)
    opaque: set[str] = field(default_factory=set)

    def add(self, value: str, *, opaque: bool = False) -> None:
        value = value.strip()
        if value and MASK not in value:
            (self.opaque if opaque else self.credentials).add(value)

    def merge(self, other: Found) -> None:
        self.credentials |= other.credentials
        self.opaque |= other.opaque


# -- URL paths --------------------------------------------------------------------------------

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


def _plain(raw: str) -> bool:
    return _UUID.fullmatch(raw) is not None or all(_WORDISH.fullmatch(p) for p in _PIECES.split(raw))


def _opaque(raw: str) -> bool:
    return any(len(p) >= OPAQUE_RUN and not _WORDISH.fullmatch(p) for p in _PIECES.split(raw))


def _token_like(raw: str) -> bool:
    """Loosely a token, where the path already says one follows (after ``webhooks``, ``key``)."""
    if len(raw) < 6 or raw.isdigit():
        return False
    return not _plain(raw) or (any(c.isdigit() for c in raw) and any(c.isalpha() for c in raw))


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
    if telegram and (":" in telegram["token"] or not _plain(telegram["token"])):
        return "bot"
    if _slack_secret(segments, i) or _TOKENS.search(raw):
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


# -- free text --------------------------------------------------------------------------------

#: Text without any of these holds nothing any rule below could mask.
SUSPECT = re.compile(
    r"[=:%/;]|-----BEGIN|[A-Za-z0-9+/_-]{16}|(?i:bearer|basic|token|digest|negotiate|ntlm|ssws)"
)
_PEM = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?P<body>.*?)"
    r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
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
#: Well-known token formats (secret scanners' rules for GitHub, GitLab, Slack, AWS, Stripe,
#: Google, SendGrid, Twilio, npm, PyPI, OpenAI/Anthropic, Databricks, Hugging Face, Shopify,
#: Atlassian, Doppler, Mailgun, Postman, DigitalOcean, Vault, Grafana, age, Linear, Notion,
#: Square, Sentry, Telegram, Discord, RubyGems) and JWTs.
_TOKENS = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+){0,2}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|gl(?:pat|dt|rt|ptt|cbt|imt|soat|ft|oas|agent)-[A-Za-z0-9_-]{20,}"
    r"|xox[abeoprs]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}"
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9+/=]{20,}"
    r"|AIza[0-9A-Za-z_-]{35}|GOCSPX-[A-Za-z0-9_-]{20,}|ya29\.[0-9A-Za-z_-]{20,}|1//0[0-9A-Za-z_-]{30,}"
    r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}|SK[0-9a-fA-F]{32}|npm_[A-Za-z0-9]{36}"
    r"|pypi-[A-Za-z0-9_-]{50,}|sk-(?:ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"
    r"|dapi[0-9a-f]{32}(?:-\d+)?|hf_[A-Za-z0-9]{30,}|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"
    r"|ATATT[A-Za-z0-9_=-]{50,}|dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}|key-[0-9a-f]{32}"
    r"|PMAK-[0-9a-f]{24}-[0-9a-f]{34}|do[opr]_v1_[a-f0-9]{64}|hv[sbr]\.[A-Za-z0-9_-]{20,}"
    r"|glsa_[A-Za-z0-9]{32}_[a-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}|AGE-SECRET-KEY-1[0-9A-Z]{58}"
    r"|lin_api_[A-Za-z0-9]{40}|(?:secret|ntn)_[A-Za-z0-9]{40,}|sq0(?:atp|csp)-[0-9A-Za-z_-]{22,}"
    r"|sntr[ysu]s_[A-Za-z0-9+/=_-]{40,}|\d{5,}:AA[A-Za-z0-9_-]{30,}|rubygems_[0-9a-f]{48}"
    r"|[MNO][A-Za-z0-9_-]{23,27}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}"
    r")"
)
_AWS_KEY_ID = re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_B64 = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/_-]{16,}={0,2}(?![A-Za-z0-9+/=_-])")
_USER_PASSWORD = re.compile(r"[^\s:]{1,128}:\S{4,}")
_HEADER = re.compile(r"^[ \t]*(?P<name>[A-Za-z][\w-]{0,63})[ \t]*:[ \t]*(?P<value>[^\r\n]+)", re.MULTILINE)
_KEY = re.compile(r"(?<![\w.-])(?P<key>[A-Za-z_][\w.-]{0,63})\\?[\"']?[ \t]*[:=](?![=/])[ \t]*")
_BARE = re.compile(r"(?:(?:bearer|basic|token|digest)[ \t]+)?[^\s\"'&;<>\\]+", re.IGNORECASE)
_CONN = re.compile(
    r"(?:^|(?<=;))[ \t]*(?P<key>[A-Za-z][\w .-]{0,40}?)[ \t]*=(?P<value>[^;\r\n]*)", re.MULTILINE
)
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_LONGEST_QUOTED = 2000


def mask_text(text: str, found: Found | None = None, names: NameCheck = name_is_secret) -> str:
    """``text`` with every secret shape masked; what was masked is added to ``found``."""
    if SUSPECT.search(text) is None:
        return text
    return _scan(text, found if found is not None else Found(), names, nested=False)


def _scan(text: str, found: Found, names: NameCheck, *, nested: bool) -> str:
    if "-----BEGIN" in text:
        text = _PEM.sub(lambda m: _pem(m, found), text)
    if "://" in text:
        text = _URL.sub(lambda m: _url(m, found, names), text)
    if "/" in text:
        text = _PATH.sub(lambda m: mask_path(m[0], found, names), text)
    text = _DIGEST.sub(lambda m: _masked(m, "params", found), text)
    text = _SCHEME.sub(lambda m: _scheme(m, found), text)
    aws_key_id = _AWS_KEY_ID.search(text) is not None  # its secret key may sit beside it
    text = _TOKENS.sub(lambda m: _masked(m, 0, found), text)
    if aws_key_id:
        text = _AWS_SECRET.sub(lambda m: _aws_secret(m, found), text)
    if not nested:
        text = _B64.sub(lambda m: _base64(m, found, names), text)
    if ":" in text:
        text = _HEADER.sub(lambda m: _masked(m, "value", found) if names(m["name"]) else m[0], text)
    if ":" in text or "=" in text:
        text = _pairs(text, found, names)
    if ";" in text:
        text = _CONN.sub(lambda m: _conn(m, found, names), text)
    if not nested and _PERCENT.search(text):
        text = _percent_encoded(text, found, names)
    return text


def _masked(match: re.Match[str], group: int | str, found: Found) -> str:
    value = match[group]
    if value.strip() in ("", MASK):
        return match[0]
    found.add(value)
    start, end = match.start(group) - match.start(), match.end(group) - match.start()
    return match[0][:start] + MASK + match[0][end:]


def _pem(match: re.Match[str], found: Found) -> str:
    return _masked(match, "body", found)


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
        elif not colon and (len(user) >= OPAQUE_RUN or not _plain(unquote(user))):
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
    cred, scheme = match["cred"], match["scheme"].lower()
    if cred.startswith(MASK) or (
        scheme != "bearer" and (len(cred) < 6 or (cred.isalpha() and cred.islower()))
    ):
        return match[0]
    if scheme == "basic":
        found.add(_basic_password(cred))
    return _masked(match, "cred", found)


def _basic_password(credential: str) -> str:
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
    decoded = _decoded(match[0])
    if decoded is None:
        return match[0]
    inner = Found()
    _scan(decoded, inner, names, nested=True)
    if not (inner.credentials or inner.opaque or _USER_PASSWORD.fullmatch(decoded.strip())):
        return match[0]
    found.merge(inner)
    found.add(decoded.partition(":")[2] if _USER_PASSWORD.fullmatch(decoded.strip()) else "")
    return _masked(match, 0, found)


def _pairs(text: str, found: Found, names: NameCheck) -> str:
    """Mask the value of every ``name=value`` / ``name: value`` whose name is secret."""
    out, pos = [], 0
    for match in _KEY.finditer(text):
        if match.start() < pos or not names(match["key"]):
            continue
        start, end = _value_span(text, match.end())
        value = text[start:end]
        if value.strip() in ("", MASK):
            continue
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
    end = start + len(bare[0].rstrip(",.:)]}"))  # the sentence's punctuation, not the value's
    return start, end


def _conn(match: re.Match[str], found: Found, names: NameCheck) -> str:
    return _masked(match, "value", found) if names(match["key"].strip()) else match[0]


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
