"""Key names that hold secrets, in any case style.

A name is split into words (``connectionString`` → connection string, ``X-Api-Key`` → x api key,
``DB_PWD`` → db pwd). It is secret when its letters hold a secret fragment (``password``,
``token``, ``secret``, ``jwt``, ``session``, ``webhook``, ``apikey`` …), one of its words is a
secret word (``pwd``, ``pass``, ``sig``, ``pin``, ``sid`` …), or it ends in ``key`` after any word
but a non-secret kind (``api_key``, ``AccountKey``, ``x-functions-key`` are secret;
``idempotency_key``, ``sort_key``, ``public_key`` and a bare ``key`` are not). ``author`` and
``authority`` are not ``auth``; ``passenger`` is not ``pass``; ``tokenizer_name`` holds ``token``
and is masked, as Airflow's masker would.
"""

from __future__ import annotations

import functools
import re

__all__ = ["SECRET_KEY_PATTERN", "key_words", "name_is_secret"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
_AIRFLOW_NORMAL = re.compile(r"\W+")
#: Secret fragments, searched in a name's words joined without separators (``clientsecret``).
SECRET_KEY_PATTERN = re.compile(
    r"pass(?:word|wd|phrase|code)|pwd|secret|token|auth(?!or)|apikey|accesskey|privatekey|privkey"
    r"|credential|private|cookie|session|signature|webhook|jwt|bearer|connectionstring|connstr"
)
_SECRET_WORDS = frozenset(
    {"pass", "pw", "pin", "pat", "sig", "sas", "otp", "totp", "mfa", "creds", "cred", "dsn", "sid"}
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
