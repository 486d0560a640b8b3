"""Which calls in Python code reach outside, and what a re-run of each does (used by :mod:`.python_code`).

Calls are recognised by their dotted name as written (``requests.post``, ``cur.execute``,
``s3.put_object``), the way a reviewer reads them: the scan never imports or runs the code it reads.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.call_names import (
    FIX_EFFECT,
    FIX_HTTP,
    FIX_JOB,
    FIX_SQL,
    HOOK_DIALECTS,
    HTTP_BASE,
    HTTP_MUTATING,
    JOB_ATTRS,
    JOB_TOKENS,
    NOTIFY_ATTRS,
    OBJECT_ATTRS,
    OPAQUE,
    PUBLISH_ATTRS,
    READ_ATTRS,
    SQL_BASE,
)
from airflow_crashsafe.scan.exprs import dotted, is_random, kw, refs_run, snippet
from airflow_crashsafe.scan.model import Finding, Reason, combine
from airflow_crashsafe.scan.sql import PARAM_MARK, classify_sql

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["classify_call"]


def _dialect(base: str, scope: Scope, depth: int = 0) -> str | None:
    text = base.lower()
    for key, dialect in HOOK_DIALECTS.items():
        if key in text:
            return dialect
    root = base.split(".")[0].removesuffix("()")
    value = scope.assigned.get(root)
    if value is not None and depth < 4:
        inner = dotted(value.func) if isinstance(value, ast.Call) else dotted(value)
        found = _dialect(inner, scope, depth + 1)
        if found:
            return found
    return scope.walk.dialect_hint if depth == 0 else None


def _http(node: ast.Call, method: str, scope: Scope) -> Finding:
    headers = kw(node, "headers")
    if method in {"GET", "HEAD", "OPTIONS"}:
        return Finding("safe", "http_get", [Reason(f"an HTTP {method} reads", snippet(node))])
    if isinstance(headers, ast.Dict):
        for key, value in zip(headers.keys, headers.values, strict=True):
            if isinstance(key, ast.Constant) and "idempotency" in str(key.value).lower():
                if is_random(value, scope) or not refs_run(value, scope):
                    return Finding(
                        "risky",
                        "http_mutating",
                        [
                            Reason(
                                f"HTTP {method} with an idempotency key made per attempt, not per run",
                                snippet(node),
                            )
                        ],
                        FIX_HTTP,
                    )
                return Finding(
                    "safe",
                    "http_keyed",
                    [Reason(f"HTTP {method} with an idempotency key derived from the run", snippet(node))],
                )
    return Finding(
        "risky",
        "http_mutating",
        [Reason(f"HTTP {method} without an idempotency key: a re-run sends it again", snippet(node))],
        FIX_HTTP,
    )


def classify_call(node: ast.Call, name: str, scope: Scope) -> Finding | None:
    """The finding of one call, or None when it reaches nothing outside (or is a user function)."""
    attr = name.rsplit(".", 1)[-1]
    base = name.rsplit(".", 1)[0].lower() if "." in name else ""
    task = getattr(scope.fn, "__name__", "task")
    if name in OPAQUE or ("subprocess" in name and attr in {o.split(".")[-1] for o in OPAQUE}):
        return Finding(
            "unknown",
            "opaque_command",
            [Reason("a subprocess: what it runs is not readable here", snippet(node))],
            "replay_safe(task, reason=...) if the command is safe to repeat",
        )
    if name in {"requests.request", "httpx.request", "session.request"} or (
        attr == "request" and any(b in base for b in HTTP_BASE)
    ):
        method = node.args[0] if node.args else kw(node, "method")
        verb = str(method.value).upper() if isinstance(method, ast.Constant) else "POST"
        return _http(node, verb, scope)
    if attr in HTTP_MUTATING | {"get", "head"} and (
        any(b in base for b in HTTP_BASE) or name in {"post", "put", "patch"}
    ):
        if attr in {"get", "head"} and not any(
            b in base for b in ("requests", "httpx", "session", "client", "http", "api")
        ):
            return None  # dict.get and friends
        return _http(node, attr.upper(), scope)
    if attr == "Request" and ("urllib" in base or name == "Request"):
        method = kw(node, "method")
        verb = (
            str(method.value).upper()
            if isinstance(method, ast.Constant)
            else ("POST" if kw(node, "data") else "GET")
        )
        return _http(node, verb, scope)
    if attr == "HttpHook" or name.endswith("HttpHook"):
        method = kw(node, "method")
        verb = str(method.value).upper() if isinstance(method, ast.Constant) else "POST"
        return _http(node, verb, scope) if verb not in {"GET", "HEAD"} else None
    if name in {"smtplib.SMTP", "smtplib.SMTP_SSL", "SMTP", "SMTP_SSL"}:
        return None  # the connection; sending is the finding
    if (
        attr in NOTIFY_ATTRS
        or (attr == "send_message" and "sqs" not in base)
        or ("slack" in base and attr in {"send", "send_text", "send_dict", "call"})
    ):
        return Finding(
            "risky",
            "notification",
            [Reason("a message is sent again on a re-run", snippet(node))],
            FIX_EFFECT.format(task=task),
        )
    if base.endswith("messages") and attr == "create":
        return Finding(
            "risky",
            "notification",
            [Reason("an SMS/chat message is sent again on a re-run", snippet(node))],
            FIX_EFFECT.format(task=task),
        )
    if (
        attr in PUBLISH_ATTRS
        or (attr == "send_message" and "sqs" in base)
        or ("producer" in base and attr == "send")
    ):
        return Finding(
            "risky",
            "queue_publish",
            [Reason("a message is published again on a re-run", snippet(node))],
            FIX_EFFECT.format(task=task),
        )
    if attr in OBJECT_ATTRS:
        if is_random(node, scope) or is_random(node.func, scope):
            return Finding(
                "risky",
                "object_write_random",
                [
                    Reason(
                        "an object written under a random or time-based name: a re-run writes another",
                        snippet(node),
                    )
                ],
                'name the object from the run (e.g. f"{ds}/part.parquet") so a re-run overwrites it',
            )
        return Finding(
            "safe",
            "object_write_fixed",
            [
                Reason(
                    "an object written under a name fixed by the run: a re-run overwrites it", snippet(node)
                )
            ],
        )
    if attr == "to_sql":
        mode = kw(node, "if_exists")
        how = str(mode.value) if isinstance(mode, ast.Constant) else "fail"
        if how == "append":
            return Finding(
                "risky",
                "append",
                [Reason("DataFrame.to_sql(if_exists='append') appends again on a re-run", snippet(node))],
                FIX_SQL,
            )
        return Finding(
            "safe",
            "overwrite",
            [Reason(f"DataFrame.to_sql(if_exists={how!r}) does not add rows twice", snippet(node))],
        )
    if attr == "insert_rows":
        replace = kw(node, "replace")
        if isinstance(replace, ast.Constant) and replace.value is True:
            return Finding(
                "safe",
                "natural_key_merge",
                [Reason("insert_rows(replace=True) upserts on the key", snippet(node))],
            )
        return Finding(
            "risky",
            "append",
            [Reason("insert_rows appends the rows again on a re-run", snippet(node))],
            FIX_SQL,
        )
    if attr in JOB_ATTRS:
        if any(k.arg and JOB_TOKENS.search(k.arg) for k in node.keywords):
            return Finding(
                "safe", "job_keyed", [Reason("a job submitted with a client token", snippet(node))]
            )
        return Finding(
            "risky",
            "job_submission",
            [Reason("an external job submitted again on a re-run", snippet(node))],
            FIX_JOB,
        )
    if attr in {"execute", "executemany", "run", "run_sql"} and not any(
        b in base for b in ("subprocess", "asyncio", "http")
    ):
        return _sql(node, base, scope)
    if attr in READ_ATTRS and any(b in base for b in SQL_BASE):
        return Finding("safe", "read_only", [Reason("a read", snippet(node))])
    return None


def _param_markers(node: ast.Call, scope: Scope) -> list[str]:
    """Markers of the placeholders whose parameter is a value of the run (``(ds,)``, ``{"day": ds}``)."""
    params = kw(node, "parameters", "params", "vars") or (node.args[1] if len(node.args) > 1 else None)
    if isinstance(params, ast.Name) and params.id in scope.assigned:
        params = scope.assigned[params.id]
    out: list[str] = []
    if isinstance(params, ast.Tuple | ast.List):
        out += [f"{PARAM_MARK}{i}" for i, e in enumerate(params.elts) if refs_run(e, scope)]
    elif isinstance(params, ast.Dict):
        for key, value in zip(params.keys, params.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and refs_run(value, scope):
                out.append(f"{PARAM_MARK}{key.value}")
    return out


def _sql(node: ast.Call, base: str, scope: Scope) -> Finding | None:
    arg = kw(node, "sql", "statement", "query") or (node.args[0] if node.args else None)
    text = scope.string_of(arg)
    sqlish = any(b in base for b in SQL_BASE)
    if text is None:
        if not sqlish:
            return None
        return Finding(
            "unknown",
            "dynamic_sql",
            [Reason("SQL built at run time: the scan cannot read it", snippet(node))],
            FIX_SQL,
        )
    markers = list(scope.walk.markers) + _param_markers(node, scope)
    autocommit = kw(node, "autocommit")
    transactional = (
        not (isinstance(autocommit, ast.Constant) and autocommit.value is True) and not scope.walk.autocommit
    )
    before = len(scope.walk.sql.findings)
    classify_sql(
        text,
        dialect=_dialect(base, scope),
        transactional=transactional,
        markers=markers,
        fix_for={"append": FIX_SQL, "increment": FIX_SQL, "merge": FIX_SQL, "overwrite": FIX_SQL},
        facts=scope.walk.sql,
    )
    new = scope.walk.sql.findings[before:]
    if not new:
        return None
    if not sqlish and all(f.category == "unparsed_sql" for f in new):
        return None  # some other .run(): not SQL after all
    found = combine(new)
    found.reasons = [Reason(r.why, r.evidence or snippet(node)) for r in found.reasons]
    return found
