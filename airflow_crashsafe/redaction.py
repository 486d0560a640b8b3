"""One redaction policy for everything crashsafe stores, logs, returns or shows.

The ledger keeps what a call sent and what came back (docs/design.md, "Ledger"), so that a retry
can tell a repeat from a new payload and replay a success. None of it may hold a secret: the store,
the task log, XCom, ``airflow-crashsafe ledger show`` and the UI all pass through this one policy.

- A **secret key** is any mapping key (JSON at any depth, form fields, query parameters, text of
  the form ``name=value`` / ``name: value``) whose name contains one of Airflow's sensitive field
  names (its secrets masker's ``DEFAULT_SENSITIVE_FIELDS`` plus ``[core] sensitive_var_conn_names``)
  or matches :data:`SECRET_KEY_PATTERN`, or that the caller names (``redact_fields``). Its value is
  masked unless it is a number or a boolean (fencing tokens and counters such as ``max_tokens``
  are not secrets).
- **Query strings** are stripped from endpoints, except parameters the caller names safe.
- A request **body that is neither JSON nor a form** is kept only as ``{"body_sha256", "length"}``.
- **Free text** (errors, text responses, log lines) is scrubbed: ``name=value`` pairs with a secret
  name, ``Bearer``/``Basic`` credentials, URL query strings and passwords, every value the policy
  already masked elsewhere in the same call, and every secret registered with Airflow's masker.

This module imports nothing from Airflow at import time (the UI and the CLI use it too).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from airflow_crashsafe.dsn import mask_dsn_text

__all__ = [
    "DEFAULT_POLICY",
    "MASK",
    "MAX_TEXT",
    "SECRET_KEY_PATTERN",
    "SENSITIVE_FIELDS",
    "RedactionPolicy",
    "body_fields",
    "body_fingerprint",
    "mask_in_task_log",
    "query_params",
]

MASK = "***"
MAX_TEXT = 2000
#: A copy of Airflow 3.3's secrets-masker ``DEFAULT_SENSITIVE_FIELDS``, for when Airflow is absent;
#: :func:`sensitive_fields` uses Airflow's own set (and its configured additions) when it can.
SENSITIVE_FIELDS = frozenset(
    {
        "access_key",
        "access_token",
        "api_key",
        "apikey",
        "auth_header",
        "authorization",
        "bearer",
        "connection_string",
        "dsn",
        "passphrase",
        "passwd",
        "password",
        "private_key",
        "proxy",
        "proxy_password",
        "proxies",
        "secret",
        "service_account",
        "service_key",
        "token",
        "keyfile_dict",
        "webhook_url",
    }
)
#: Name fragments that mark a secret beyond Airflow's list (``auth`` but not ``author``).
SECRET_KEY_PATTERN = re.compile(
    r"pass(word|wd)?|secret|token|auth(?!or)|api[-_]?key|credential|private|cookie|session|signature",
    re.IGNORECASE,
)
#: Known secret values shorter than this are not scrubbed from text (as Airflow's masker does).
MIN_KNOWN_SECRET = 5
_NON_WORD = re.compile(r"\W+")
_BEARER = re.compile(r"\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_PAIR = re.compile(r"""(?P<key>[A-Za-z_][\w.-]*)(?P<sep>["']?\s*[:=]\s*["']?)(?P<value>[^\s"'&,;)}\]]+)""")
_URL_QUERY = re.compile(r"(?P<base>\b[a-z][a-z0-9+.-]*://[^\s?#\"'<>]+)\?[^\s#\"'<>]*", re.IGNORECASE)
#: Text without these cannot hold a pair, a URL credential or a Bearer token.
_SUSPECT = re.compile(r"[=:@?]|bearer|basic", re.IGNORECASE)
_FORM_KEY = re.compile(r"^[\w.\-\[\]]+$")


@functools.cache
def sensitive_fields() -> frozenset[str]:
    """Airflow's sensitive field names (and ``[core] sensitive_var_conn_names``), else the copy."""
    names = set(SENSITIVE_FIELDS)
    try:
        from airflow.sdk._shared.secrets_masker import DEFAULT_SENSITIVE_FIELDS
    except ImportError:
        return frozenset(names)
    names |= DEFAULT_SENSITIVE_FIELDS
    try:
        from airflow.configuration import conf

        extra = conf.get("core", "sensitive_var_conn_names", fallback="") or ""
    except Exception:  # a broken Airflow config must not switch redaction off
        extra = ""
    names |= {_normalise(n) for n in extra.split(",") if n.strip()}
    return frozenset(names)


def _normalise(name: str) -> str:
    return _NON_WORD.sub("_", name.strip().lower())


@functools.lru_cache(maxsize=4096)
def _names_secret(name: str) -> bool:
    """True when ``name`` contains a sensitive field name or matches the pattern (cached: hot path)."""
    key = _normalise(name)
    return SECRET_KEY_PATTERN.search(key) is not None or any(s in key for s in sensitive_fields())


def body_fingerprint(body: str | bytes) -> dict[str, Any]:
    """What is kept of a body that cannot be redacted field by field: its digest and length."""
    raw = body.encode() if isinstance(body, str) else body
    return {"body_sha256": hashlib.sha256(raw).hexdigest(), "length": len(raw)}


@dataclass(frozen=True)
class RedactionPolicy:
    """What one call (or the UI, or the CLI) masks; immutable, extended with :meth:`knowing`.

    ``fields``: extra key names to mask (any case); ``safe_query_params``: query parameters kept in
    endpoints; ``known_secrets``: values already masked elsewhere, scrubbed from any text.
    """

    fields: frozenset[str] = frozenset()
    safe_query_params: frozenset[str] = frozenset()
    known_secrets: frozenset[str] = field(default=frozenset(), repr=False)

    @classmethod
    def of(cls, fields: Iterable[str] = (), safe_query_params: Iterable[str] = ()) -> RedactionPolicy:
        return cls(frozenset(_normalise(f) for f in fields), frozenset(safe_query_params))

    # -- what is a secret ---------------------------------------------------------------------

    def is_secret_key(self, name: object) -> bool:
        """True when a value under ``name`` must be masked."""
        return _names_secret(str(name)) or (bool(self.fields) and _normalise(str(name)) in self.fields)

    def knowing(self, *values: Any) -> RedactionPolicy:
        """This policy, also scrubbing every secret found in ``values`` (strings, or JSON-like)."""
        found = set(self.known_secrets)
        for value in values:
            found |= self._secrets_in(value, secret=isinstance(value, str))
        found = {s for s in found if len(s) >= MIN_KNOWN_SECRET}
        return RedactionPolicy(self.fields, self.safe_query_params, frozenset(found))

    def _secrets_in(self, value: Any, *, secret: bool) -> set[str]:
        if isinstance(value, Mapping):
            return {
                s
                for k, v in value.items()
                for s in self._secrets_in(v, secret=secret or self.is_secret_key(k))
            }
        if isinstance(value, list | tuple | set | frozenset):
            return {s for v in value for s in self._secrets_in(v, secret=secret)}
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if not (secret and isinstance(value, str) and value):
            return set()
        return {value, value.split()[-1]} if " " in value.strip() else {value}  # "Bearer X": X too

    # -- JSON-like values ---------------------------------------------------------------------

    def value(self, value: Any, _depth: int = 0) -> Any:
        """A JSON-like copy of ``value``: secret keys masked at any depth, strings scrubbed."""
        if value is None or type(value) in (int, float, bool):
            return value
        if _depth > 20:
            return MASK
        if isinstance(value, Mapping):
            return {str(k): self._field(str(k), v, _depth) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v, _depth + 1) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value

    def _field(self, key: str, value: Any, depth: int) -> Any:
        if value is None or isinstance(value, bool | int | float) or not self.is_secret_key(key):
            return self.value(value, depth + 1)
        return MASK

    # -- free text ----------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with credentials, secret ``name=value`` pairs and known secrets masked, cut."""
        for known in sorted(self.known_secrets, key=len, reverse=True):
            text = text.replace(known, MASK)
        if _SUSPECT.search(text) is None:  # the common case: a plain value, nothing to pair
            text = _airflow_masked(text)
            return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
        text = mask_dsn_text(text)  # URL and libpq connection-string passwords, in every form
        text = _URL_QUERY.sub(lambda m: f"{m.group('base')}?{MASK}", text)
        text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
        text = _PAIR.sub(self._pair, text)
        text = _airflow_masked(text)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"

    def _pair(self, match: re.Match[str]) -> str:
        if not self.is_secret_key(match.group("key")) or match.group("value") == MASK:
            return match.group(0)
        return f"{match.group('key')}{match.group('sep')}{MASK}"

    # -- HTTP requests ------------------------------------------------------------------------

    def endpoint(self, endpoint: str) -> str:
        """``endpoint`` without its query string, except the parameters named safe."""
        parts = urlsplit(endpoint)
        if not parts.query and "@" not in parts.netloc:
            return endpoint
        kept = [
            (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in self.safe_query_params
        ]
        netloc = parts.netloc.rpartition("@")[2]  # never a user:password@ either
        return urlunsplit((parts.scheme, netloc, parts.path, urlencode(kept), ""))

    def query_digest(self, endpoint: str) -> str | None:
        """A digest of the query parameters :meth:`endpoint` drops that do not name a secret.

        They are part of the payload (``?amount=5``): a change must still change the call's
        fingerprint, but their values are not stored. Secret-named ones are left out, like a
        secret body field, so that a rotated credential is the same call.
        """
        pairs = parse_qsl(urlsplit(endpoint).query, keep_blank_values=True)
        dropped = sorted(
            (k, v) for k, v in pairs if k not in self.safe_query_params and not self.is_secret_key(k)
        )
        if not dropped:
            return None
        return hashlib.sha256(json.dumps(dropped, separators=(",", ":")).encode()).hexdigest()

    def body(self, body: Any) -> Any:
        """What is stored of a request body: JSON and forms redacted, any other text fingerprinted."""
        fields = body_fields(body)
        if fields is not None or body is None:
            return self.value(fields)
        if isinstance(body, str | bytes):
            return body_fingerprint(body)
        return {"body_type": type(body).__name__}  # a file or a generator: it cannot be read twice

    def response(self, body: Any) -> Any:
        """What is stored and returned of a response body: JSON redacted, text scrubbed."""
        if isinstance(body, str):
            return self.text(body)
        return self.value(body)

    def request_record(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """A stored request record (also one stored before this policy) made safe to show."""
        shown = self.value(request)
        if isinstance(request.get("endpoint"), str):
            shown["endpoint"] = self.endpoint(request["endpoint"])
        return shown


def query_params(endpoint: str) -> dict[str, Any]:
    """The query parameters of ``endpoint`` as a mapping (repeated names as lists)."""
    return _form_pairs(parse_qsl(urlsplit(endpoint).query, keep_blank_values=True))


def body_fields(body: Any) -> Any:
    """A request body as JSON-like fields (a JSON or form text parsed), or None when it has none."""
    if isinstance(body, Mapping):
        return body
    if isinstance(body, list | tuple):
        return _form_pairs(body) if _is_pair_list(body) else body
    if isinstance(body, bytes):
        try:
            body = body.decode()
        except UnicodeDecodeError:
            return None
    if not isinstance(body, str):
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict | list) else _parse_form(body)


def _is_pair_list(body: Any) -> bool:
    return (
        isinstance(body, list | tuple)
        and bool(body)
        and all(isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], str) for p in body)
    )


def _form_pairs(pairs: Iterable[Any]) -> dict[str, Any]:
    form: dict[str, Any] = {}
    for key, value in pairs:
        form.setdefault(key, []).append(value)
    return {k: v[0] if len(v) == 1 else v for k, v in form.items()}


def _parse_form(text: str) -> dict[str, Any] | None:
    """``a=1&b=2`` as a mapping, or None when ``text`` is not form-encoded."""
    if "=" not in text:
        return None
    try:
        pairs = parse_qsl(text.strip(), keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return None
    if not pairs or not all(_FORM_KEY.match(k) for k, _ in pairs):
        return None
    return _form_pairs(pairs)


def mask_in_task_log(secrets: Iterable[str]) -> None:
    """Register ``secrets`` with Airflow's masker, which filters every line of the task log."""
    secrets = list(secrets)
    if not secrets:
        return
    from airflow.sdk.log import mask_secret

    for secret in secrets:
        mask_secret(secret)


def _airflow_masked(text: str) -> str:
    """``text`` with every secret registered with Airflow's masker hidden (unchanged without it)."""
    redact = _airflow_redact()
    if redact is None:
        return text
    masked = redact(text)
    return masked if isinstance(masked, str) else text


@functools.cache
def _airflow_redact() -> Callable[[Any], Any] | None:
    try:
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:
        return None
    return redact


DEFAULT_POLICY = RedactionPolicy()
