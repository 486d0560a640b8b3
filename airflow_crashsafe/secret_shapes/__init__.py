"""What a secret looks like: in a key's name, in free text, in a URL's path, in a known value.

:mod:`airflow_crashsafe.redaction` decides where masking applies; this package only recognises,
and every rule errs toward "a secret": a value that looks like one is masked.

- :mod:`~airflow_crashsafe.secret_shapes.names`: key names that hold secrets, in any case style.
- :mod:`~airflow_crashsafe.secret_shapes.formats`: token formats that are secrets wherever they
  appear (JWTs, ``ghp_``, ``xoxb-``, ``AKIA…``, ``sk_live_``, ``AIza…``, PEM private keys …).
- :mod:`~airflow_crashsafe.secret_shapes.paths`: URL path segments that carry tokens, and those
  that read as random (*opaque*: maybe an id, so the ledger keeps their digest).
- :mod:`~airflow_crashsafe.secret_shapes.text`: every shape in free text, also base64- and
  URL-encoded.
- :mod:`~airflow_crashsafe.secret_shapes.known`: exact values a call is known to hold, found
  again in any encoding.

Patterns are compiled once and scan linearly; text without anything that could start a secret
costs one search. Nothing here imports Airflow (the watchdog uses it too).
"""

from __future__ import annotations

from airflow_crashsafe.secret_shapes.found import MASK, Found, NameCheck
from airflow_crashsafe.secret_shapes.known import KnownSecrets
from airflow_crashsafe.secret_shapes.names import SECRET_KEY_PATTERN, key_words, name_is_secret
from airflow_crashsafe.secret_shapes.paths import mask_path
from airflow_crashsafe.secret_shapes.text import basic_password, mask_text

__all__ = [
    "MASK",
    "SECRET_KEY_PATTERN",
    "Found",
    "KnownSecrets",
    "NameCheck",
    "basic_password",
    "key_words",
    "mask_path",
    "mask_text",
    "name_is_secret",
]
