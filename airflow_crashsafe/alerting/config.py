"""Build sinks from configuration: a list of tables, from a TOML/JSON file or from code.

Every secret field (``url``, ``routing_key``, ``hmac_secret``, ``password``) can be given inline,
as ``<field>_env`` (the name of an environment variable) or as ``<field>_file`` (a path whose
content is the secret), so that config files can be committed without secrets. Any mistake
raises :class:`~airflow_crashsafe.errors.ConfigurationError` naming the sink, the field and the fix.

Example (TOML)::

    [[sinks]]
    type = "slack"
    url_env = "SLACK_WEBHOOK_URL"

    [[sinks]]
    type = "pagerduty"
    routing_key_env = "PAGERDUTY_ROUTING_KEY"
    min_severity = "critical"

Every sink takes ``timeout`` (each network wait, s; above 0, at most 3600), ``deadline`` (the whole
attempt on the wall clock, s; default 30, above 0, at most 3600), ``retries`` (0 to 100) and
``min_severity``; a nan, infinite or out-of-range number is refused naming the sink and field.
Email verifies TLS certificates; see :class:`~airflow_crashsafe.alerting.sinks.EmailSink` for
``tls_insecure_skip_verify``, ``tls_ca_file`` and ``allow_plaintext_login``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_crashsafe.alerting.sinks import EmailSink, PagerDutySink, Sink, SlackSink, WebhookSink
from airflow_crashsafe.errors import ConfigurationError

__all__ = ["SINK_TYPES", "build_sink", "build_sinks", "load_config_file"]

_COMMON = {"type", "name", "timeout", "deadline", "retries", "min_severity"}
_SPEC: dict[str, tuple[set[str], set[str]]] = {
    # type: (allowed plain fields, secret fields)
    "webhook": ({"headers"}, {"url", "hmac_secret"}),
    "slack": (set(), {"url"}),
    "pagerduty": ({"url"}, {"routing_key"}),
    "email": (
        {
            "host",
            "port",
            "from",
            "to",
            "username",
            "starttls",
            "ssl",
            "tls_insecure_skip_verify",
            "tls_ca_file",
            "allow_plaintext_login",
        },
        {"password"},
    ),
}
SINK_TYPES = tuple(sorted(_SPEC))


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a ``.toml`` or ``.json`` file into a dict, or raise a ConfigurationError saying why."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"cannot read config file {file}: {exc.strerror or exc}") from None
    try:
        is_json = file.suffix.lower() == ".json"
        data = json.loads(raw) if is_json else _toml_loads(raw.decode("utf-8"), file)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"config file {file} is not valid {file.suffix or 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"config file {file} must hold a table/object at the top level")
    return data


def _toml_loads(text: str, file: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
        except ImportError:
            raise ConfigurationError(
                f"reading {file} needs TOML support: use Python 3.11+, `pip install tomli`, "
                "or write the same settings as a .json file"
            ) from None
    result: dict[str, Any] = tomllib.loads(text)
    return result


def _secret(spec: Mapping[str, Any], field: str, where: str, env: Mapping[str, str]) -> str | None:
    given = [k for k in (field, f"{field}_env", f"{field}_file") if k in spec]
    if len(given) > 1:
        raise ConfigurationError(f"{where}: give only one of {', '.join(given)}")
    if not given:
        return None
    key = given[0]
    value = spec[key]
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{where}: '{key}' must be a non-empty string")
    if key.endswith("_env"):
        if not env.get(value):
            raise ConfigurationError(
                f"{where}: environment variable {value} (named by '{key}') is not set or empty; "
                f"export it or give '{field}_file' instead"
            )
        return env[value]
    if key.endswith("_file"):
        try:
            return Path(value).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigurationError(f"{where}: cannot read '{key}' {value}: {exc.strerror or exc}") from None
    return value


def _need(value: Any, where: str, field: str) -> Any:
    if value is None or value == "":
        raise ConfigurationError(f"{where}: '{field}' is required (or '{field}_env' / '{field}_file')")
    return value


def _flag(spec: Mapping[str, Any], field: str, where: str) -> bool:
    """A true/false option; a string such as "false" is refused rather than read as true."""
    value = spec.get(field, False)
    if not isinstance(value, bool):
        raise ConfigurationError(f"{where}: '{field}' must be true or false, not {value!r}")
    return value


def build_sink(
    spec: Mapping[str, Any], *, index: int = 0, env: Mapping[str, str] | None = None, **extra: Any
) -> Sink:
    """One sink from one table. ``extra`` (e.g. ``session``) is passed to the sink's constructor."""
    env = os.environ if env is None else env
    kind = spec.get("type")
    where = f"sink #{index + 1}" + (f" ({spec['name']!r})" if "name" in spec else "")
    if kind not in _SPEC:
        raise ConfigurationError(f"{where}: 'type' must be one of {', '.join(SINK_TYPES)}, not {kind!r}")
    plain, secret_fields = _SPEC[kind]
    allowed = _COMMON | plain | secret_fields | {f"{s}_{x}" for s in secret_fields for x in ("env", "file")}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    secrets = {field: _secret(spec, field, where, env) for field in secret_fields}
    common: dict[str, Any] = {
        k: spec[k] for k in ("name", "timeout", "deadline", "retries", "min_severity") if k in spec
    }
    common.update(extra, label=where)
    factories: dict[str, Callable[[], Sink]] = {
        "webhook": lambda: WebhookSink(
            _need(secrets["url"], where, "url"),
            hmac_secret=secrets["hmac_secret"],
            headers=spec.get("headers"),
            **common,
        ),
        "slack": lambda: SlackSink(_need(secrets["url"], where, "url"), **common),
        "pagerduty": lambda: PagerDutySink(
            _need(secrets["routing_key"], where, "routing_key"),
            **({"url": spec["url"]} if "url" in spec else {}),
            **common,
        ),
        "email": lambda: EmailSink(
            host=_need(spec.get("host"), where, "host"),
            port=spec.get("port", 25),
            sender=_need(spec.get("from"), where, "from"),
            recipients=[spec["to"]] if isinstance(spec.get("to"), str) else list(spec.get("to") or []),
            username=spec.get("username"),
            password=secrets["password"],
            starttls=_flag(spec, "starttls", where),
            use_ssl=_flag(spec, "ssl", where),
            tls_insecure_skip_verify=_flag(spec, "tls_insecure_skip_verify", where),
            tls_ca_file=spec.get("tls_ca_file"),
            allow_plaintext_login=_flag(spec, "allow_plaintext_login", where),
            **{k: v for k, v in common.items() if k != "session"},
        ),
    }
    try:
        return factories[kind]()
    except ConfigurationError:
        raise  # already names the sink (its ``label``)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


def build_sinks(
    specs: Sequence[Mapping[str, Any]] | None,
    *,
    env: Mapping[str, str] | None = None,
    source: str | os.PathLike[str] | None = None,
    **extra: Any,
) -> list[Sink]:
    """All sinks of a ``sinks`` list; names default to the type and must end up unique.

    ``source``: the file the list came from, named in every error (``<file>: [[sinks]]: …``).
    """
    try:
        return _build_sinks(specs, env=env, **extra)
    except ConfigurationError as exc:
        if source is None:
            raise
        raise ConfigurationError(f"{source}: [[sinks]]: {exc}") from None


def _build_sinks(
    specs: Sequence[Mapping[str, Any]] | None, *, env: Mapping[str, str] | None, **extra: Any
) -> list[Sink]:
    if specs is None:
        return []
    if not isinstance(specs, list) or not all(isinstance(s, Mapping) for s in specs):
        raise ConfigurationError("'sinks' must be a list of tables ([[sinks]] in TOML)")
    sinks = [build_sink(spec, index=i, env=env, **extra) for i, spec in enumerate(specs)]
    names = [s.name for s in sinks]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigurationError(
            f"sink names must be unique; {', '.join(repeated)} repeats: give each sink a 'name'"
        )
    return sinks
