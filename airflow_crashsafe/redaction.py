"""One redaction policy for everything crashsafe stores, logs, returns or shows.

The ledger keeps what a call sent and what came back (docs/design.md, "Ledger"), so that a retry
can tell a repeat from a new payload and replay a success. None of it may hold a secret: the store,
the task log, XCom, ``airflow-crashsafe ledger show`` and the UI all pass through this one policy.
What is sent to the target is never changed: the policy applies to copies.

Secrets are recognised by shape (:mod:`airflow_crashsafe.secret_shapes` holds the shapes):

- A **secret key**, at any depth of JSON, form fields, query parameters and ``name=value`` text,
  is one whose name, in any case style, reads as a credential (``pwd``, ``jwt``,
  ``connectionString``, ``webhookUrl``, ``x-functions-key`` …), holds one of Airflow's sensitive
  field names (its masker's list plus ``[core] sensitive_var_conn_names``), or that the caller
  names (``redact_fields``). Its value is masked unless it is a number or a boolean (fencing
  tokens and counters such as ``max_tokens`` are not secrets).
- Every **string** is scrubbed of secret shapes: credentials after ``Bearer``/``Basic``/``Token``/
  ``Digest``, known token formats and JWTs, private keys, connection-string secrets, URL
  passwords, query strings and token-carrying path segments, base64- and URL-encoded secrets;
  also of every value the policy already masked elsewhere in the same call (and its URL-encoded,
  JSON-escaped and base64 forms), and of every secret registered with Airflow's masker.
- **Endpoints** lose their query string, except parameters the caller names safe, and the path
  segments that carry tokens or read as random.
- A request **body that is neither JSON nor a form** is kept only as ``{"body_sha256", "length"}``.

This module imports nothing from Airflow: it uses Airflow's masker and sensitive names only in a
process that has already imported them (the watchdog, the UI and the CLI use it too).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from airflow_crashsafe.secret_shapes import (
    MASK,
    SECRET_KEY_PATTERN,
    Found,
    KnownSecrets,
    basic_password,
    key_words,
    mask_path,
    mask_text,
    name_is_secret,
)

__all__ = [
    "DEFAULT_POLICY",
    "MASK",
    "MAX_TEXT",
    "SECRET_KEY_PATTERN",
    "SENSITIVE_FIELDS",
    "RedactionPolicy",
    "auth_secrets",
    "body_fields",
    "body_fingerprint",
    "mask_in_task_log",
    "query_params",
]

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
#: Known secret values shorter than this are not scrubbed from text (as Airflow's masker does).
MIN_KNOWN_SECRET = 5
_FORM_KEY = re.compile(r"^[\w.\-\[\]]+$")
#: Airflow keeps one masker per import path: the task SDK's and the core's (api-server, CLI).
_AIRFLOW_MASKERS = ("airflow.sdk._shared.secrets_masker", "airflow._shared.secrets_masker")


def sensitive_fields() -> frozenset[str]:
    """Airflow's sensitive field names (and ``[core] sensitive_var_conn_names``), else the copy.

    Airflow's own set is read only in a process that has imported Airflow (a task, the UI): the
    watchdog must not import it, and the copy is the same list.
    """
    airflow = sys.modules.get("airflow")
    return _airflow_sensitive_fields() if airflow is not None else SENSITIVE_FIELDS


@functools.cache
def _airflow_sensitive_fields() -> frozenset[str]:
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
    """A name as its words in snake case: ``cardNumber``, ``Card-Number`` and ``CARD_NUMBER`` agree."""
    return "_".join(key_words(name))


def body_fingerprint(body: str | bytes) -> dict[str, Any]:
    """What is kept of a body that cannot be redacted field by field: its digest and length."""
    raw = body.encode() if isinstance(body, str) else body
    return {"body_sha256": hashlib.sha256(raw).hexdigest(), "length": len(raw)}


def _digest(values: Any) -> str:
    return hashlib.sha256(json.dumps(values, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class RedactionPolicy:
    """What one call (or the UI, or the CLI) masks; immutable, extended with :meth:`knowing`.

    ``fields``: extra key names to mask (any case style); ``safe_query_params``: query parameters
    kept in endpoints; ``known_secrets``: values already masked elsewhere, scrubbed from any text.
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
        name = str(name)
        return name_is_secret(name, sensitive_fields()) or (
            bool(self.fields) and _normalise(name) in self.fields
        )

    def knowing(self, *values: Any, urls: Iterable[str] = ()) -> RedactionPolicy:
        """This policy, also scrubbing every secret found in ``values`` and ``urls``.

        ``values``: strings (each a secret) or JSON-like values (the values of secret keys, and
        whatever has a secret's shape in the others); ``urls``: endpoints or URLs, whose
        secret query parameters and token-carrying path segments are secrets.
        """
        found = Found(set(self.known_secrets))
        for value in values:
            self._secrets_in(value, found, secret=isinstance(value, str))
        for url in urls:
            self._secrets_in(query_params(url), found, secret=False)
            self.endpoint(url, found)
        known = {s for s in found.credentials | found.opaque if len(s) >= MIN_KNOWN_SECRET}
        return RedactionPolicy(self.fields, self.safe_query_params, frozenset(known))

    def _secrets_in(self, value: Any, found: Found, *, secret: bool) -> None:
        kind = type(value)
        if value is None or kind is int or kind is float or kind is bool:
            return  # the common leaves first: this walks every request
        if kind is str and not secret:
            mask_text(value, found, self.is_secret_key)
        elif kind is dict or isinstance(value, Mapping):
            for k, v in value.items():
                self._secrets_in(v, found, secret=secret or self.is_secret_key(k))
        elif isinstance(value, list | tuple | set | frozenset):
            for v in value:
                self._secrets_in(v, found, secret=secret)
        elif isinstance(value, bytes):
            self._secrets_in(value.decode("utf-8", "replace"), found, secret=secret)
        elif isinstance(value, str) and value and not secret:
            mask_text(value, found, self.is_secret_key)
        elif isinstance(value, str) and value:
            found.add(value)
            words = value.split()
            if len(words) > 1:  # "Bearer X": X on its own too
                found.add(words[-1])
            if len(words) == 2 and words[0].lower() == "basic":
                found.add(basic_password(words[1]))

    def log_masks(self) -> set[str]:
        """What Airflow's masker must hide in the task log: the known secrets in their plain forms."""
        return set(self._known.plain_forms)

    @functools.cached_property
    def _known(self) -> KnownSecrets:
        return KnownSecrets(self.known_secrets)

    # -- JSON-like values ---------------------------------------------------------------------

    def value(self, value: Any, _depth: int = 0) -> Any:
        """A JSON-like copy of ``value``: secret keys masked at any depth, strings scrubbed (keys too)."""
        kind = type(value)
        if value is None or kind is int or kind is float or kind is bool:
            return value
        if kind is str:  # the common leaf first: the walk is on the hot path of every call
            return self.text(value)
        if _depth > 20:
            return MASK
        if kind is dict or isinstance(value, Mapping):
            return {_key(str(k)): self._field(str(k), v, _depth) for k, v in value.items()}
        if kind is list or isinstance(value, list | tuple):
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
        """``text`` scrubbed (:meth:`scrub`) and cut to :data:`MAX_TEXT` characters."""
        text = self.scrub(text)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"

    def scrub(self, text: str) -> str:
        """``text`` with known secrets, every secret shape and Airflow's registered secrets masked."""
        if self.known_secrets:
            text = self._known.scrub(text)
        return _airflow_masked(mask_text(text, names=self.is_secret_key))

    # -- HTTP requests ------------------------------------------------------------------------

    def endpoint(self, endpoint: str, found: Found | None = None) -> str:
        """``endpoint`` without its query string (but the parameters named safe), its password, and
        its path segments that carry a token or read as random (those go to ``found``)."""
        parts = urlsplit(endpoint)
        path = mask_path(parts.path, found, self.is_secret_key)
        if not parts.query and "@" not in parts.netloc and path == parts.path:
            return endpoint
        kept = [
            (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k in self.safe_query_params
        ]
        netloc = parts.netloc.rpartition("@")[2]  # never a user:password@ either
        if found is not None and netloc != parts.netloc:
            found.add(parts.netloc.rpartition("@")[0].partition(":")[2] or parts.netloc.rpartition("@")[0])
        return urlunsplit((parts.scheme, netloc, path, urlencode(kept), ""))

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
        return _digest(dropped) if dropped else None

    def opaque_digest(self, value: Any = None, *, endpoint: str | None = None) -> str | None:
        """A digest of what masking took only because it reads as random (an id, maybe), or None.

        A path segment such as ``/files/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms`` may be
        the payload rather than a credential: two calls that differ in it must not look the
        same to the ledger's conflict check. Credential shapes (a token after ``/bot``, a JWT,
        a secret-named field) stay out, so that a rotated credential is the same call.
        """
        found = Found()
        if endpoint is not None:
            mask_path(urlsplit(endpoint).path, found, self.is_secret_key)
        self._secrets_in(value, found, secret=False)
        return _digest(sorted(found.opaque)) if found.opaque else None

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


@functools.lru_cache(maxsize=4096)
def _key(name: str) -> str:
    """A mapping key scrubbed of secret shapes (keys repeat across rows: cached)."""
    return mask_text(name)


def auth_secrets(auth: Any) -> dict[str, str]:
    """What a ``requests`` session authenticates with (a ``(login, password)`` pair or a basic-auth
    object), as secret-named values for :meth:`RedactionPolicy.knowing`: the password and the
    ``Basic`` credential the session sends."""
    login, password = auth if isinstance(auth, tuple) and len(auth) == 2 else (None, None)
    login, password = getattr(auth, "username", login), getattr(auth, "password", password)
    if not isinstance(password, str) or not password:
        return {}
    token = base64.b64encode(f"{login or ''}:{password}".encode()).decode()
    return {"password": password, "authorization": f"Basic {token}"}


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
    """``text`` with every secret registered with Airflow's maskers hidden.

    Only maskers this process has imported can hold a registered secret, so none is imported here.
    """
    for name in _AIRFLOW_MASKERS:
        masker = sys.modules.get(name)
        if masker is not None:
            masked = masker.redact(text)
            text = masked if isinstance(masked, str) else text
    return text


DEFAULT_POLICY = RedactionPolicy()
