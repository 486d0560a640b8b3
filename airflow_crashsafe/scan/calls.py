"""Which calls in Python code reach outside, and what a re-run of each does (used by :mod:`.python_code`).

Calls are recognised by their dotted name as written (``requests.post``, ``cur.execute``,
``s3.put_object``), the way a reviewer reads them: the scan never imports or runs the code it reads.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.scan.model import Finding, Reason
from airflow_crashsafe.scan.sql import PARAM_MARK, classify_sql

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["RUN_SCOPED", "classify_call", "dotted", "is_protection", "snippet", "string_value"]

#: Context names whose value is this run's (TaskFlow injects them by parameter name).
RUN_SCOPED = frozenset(
    {
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "logical_date",
        "data_interval_start",
        "data_interval_end",
        "run_id",
        "dag_run",
        "params",
        "execution_date",
        "partition",
        "day",
    }
)
_RANDOM = re.compile(
    r"\b(uuid\.uuid[14]|uuid[14]|time\.time|time_ns|datetime\.(?:now|utcnow)|\.now\(|\.utcnow\(|random\.|secrets\.|token_hex|"
    r"ti\.id|try_number|os\.getpid|mkstemp)",
)
_HTTP_BASE = ("requests", "httpx", "session", "client", "http", "api", "urllib", "sess", "conn")
_HTTP_MUTATING = {"post", "put", "patch", "delete"}
_SQL_BASE = (
    "cur",
    "hook",
    "conn",
    "db",
    "engine",
    "session",
    "sql",
    "tx",
    "warehouse",
    "pg",
    "mysql",
    "snow",
)
_NOTIFY_ATTRS = {
    "sendmail",
    "send_email",
    "send_email_smtp",
    "chat_postMessage",
    "chat_postEphemeral",
    "files_upload",
    "files_upload_v2",
}
_PUBLISH_ATTRS = {
    "publish",
    "basic_publish",
    "produce",
    "send_message_batch",
    "put_record",
    "put_records",
    "put_events",
    "send_messages",
    "xadd",
    "lpush",
    "rpush",
}
_OBJECT_ATTRS = {
    "put_object",
    "upload_file",
    "upload_fileobj",
    "load_string",
    "load_file",
    "load_bytes",
    "load_file_obj",
    "upload_from_string",
    "upload_from_filename",
    "upload_from_file",
    "upload_blob",
    "to_parquet",
    "to_csv",
    "write_deltalake",
    "write_table",
    "put",
}
_JOB_ATTRS = {
    "submit_job",
    "run_job_flow",
    "start_job_run",
    "create_job",
    "start_pipeline_execution",
    "run_now",
    "submit_run",
    "start_execution",
    "start_query_execution",
    "create_batch",
    "create_training_job",
    "start_build",
    "trigger_dag",
}
_JOB_TOKENS = re.compile(
    r"client_?token|client_request_token|idempotency|request_id|requestid|clientrequesttoken", re.IGNORECASE
)
_READ_ATTRS = {
    "get_records",
    "get_first",
    "get_pandas_df",
    "get_df",
    "read_sql",
    "read_sql_query",
    "fetchall",
    "fetchone",
    "get",
    "head",
    "options",
}
_OPAQUE = {
    "subprocess.run",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.Popen",
    "os.system",
    "os.popen",
}
_PROTECTIONS = ("effect", "fenced_transaction")
_HOOK_DIALECTS = {
    "postgres": "postgres",
    "mysql": "mysql",
    "snowflake": "snowflake",
    "bigquery": "bigquery",
    "sqlite": "sqlite",
    "redshift": "redshift",
    "mssql": "tsql",
    "trino": "trino",
}

FIX_EFFECT = (
    'wrap the call: with effect("{task}", payload=...) as fx: if fx.pending: ...; fx.done(result) '
    "(airflow_crashsafe.effects.effect), passing fx.key to the target if it takes one"
)
FIX_HTTP = (
    'send it with IdempotentHttpOperator(http_conn_id=..., endpoint=..., method="POST", json=..., '
    'target_honours_keys=True|False), or inside effect() with headers={"Idempotency-Key": fx.key}'
)
FIX_SQL = (
    'run it inside fenced_transaction(conn_id, "<target table>") as tx '
    "(airflow_crashsafe.fenced_transaction), "
    "writing with MERGE/ON CONFLICT on the natural key or DELETE of the run's partition + INSERT"
)
FIX_JOB = (
    "submit with a client token derived from the run (airflow_crashsafe.effects.idempotency_key(...)), "
    "or use CrashsafeResumableJobMixin"
)


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name/attribute chain (calls in the chain keep their name: ``a.b().c``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        base = dotted(node.func)
        return f"{base}()" if base else ""
    if isinstance(node, ast.Subscript):
        return dotted(node.value)
    return ""


def snippet(node: ast.AST, limit: int = 140) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_protection(name: str) -> bool:
    return name.split(".")[-1].removesuffix("()") in _PROTECTIONS


def _kw(node: ast.Call, *names: str) -> ast.expr | None:
    for k in node.keywords:
        if k.arg in names:
            return k.value
    return None


def _refs_run(node: ast.AST, scope: Scope) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and (sub.id in scope.run_scoped or sub.id in RUN_SCOPED):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in RUN_SCOPED:
            return True
        if isinstance(sub, ast.Call) and dotted(sub.func).endswith("idempotency_key"):
            return True
    return False


def _random(node: ast.AST, scope: Scope, depth: int = 0) -> bool:
    """True when the expression (or a local name it uses) draws a random or time-based value."""
    if _RANDOM.search(ast.unparse(node)):
        return True
    if depth > 3:
        return False
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Name)
            and sub.id in scope.assigned
            and _random(scope.assigned[sub.id], scope, depth + 1)
        ):
            return True
    return False


def string_value(node: ast.expr | None, scope: Scope, depth: int = 0) -> str | None:
    """The text of a string expression (run-scoped f-string values become the sample date)."""
    if node is None or depth > 6:
        return None
    sample = next(iter(scope.walk.markers), "x")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                inner = string_value(value.value, scope, depth + 1)
                parts.append(
                    inner
                    if inner is not None and "'" not in inner
                    else (sample if _refs_run(value.value, scope) else "x")
                )
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_value(node.left, scope, depth + 1), string_value(node.right, scope, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "... %s" % x
        return string_value(node.left, scope, depth + 1)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"format", "strip", "dedent"}
    ):
        base = string_value(node.func.value, scope, depth + 1)
        return (
            base.replace("{", "").replace("}", "")
            if base is not None and node.func.attr == "format"
            else base
        )
    if (
        isinstance(node, ast.Call)
        and dotted(node.func) in {"text", "sqlalchemy.text", "textwrap.dedent", "dedent"}
        and node.args
    ):
        return string_value(node.args[0], scope, depth + 1)
    if isinstance(node, ast.List | ast.Tuple):
        items = [string_value(e, scope, depth + 1) for e in node.elts]
        return None if any(i is None for i in items) else ";\n".join(i for i in items if i is not None)
    if isinstance(node, ast.Name):
        if node.id in scope.assigned:
            return string_value(scope.assigned[node.id], scope, depth + 1)
        known = scope.globals.get(node.id)
        if isinstance(known, str):
            return known
        if isinstance(known, list | tuple) and all(isinstance(v, str) for v in known):
            return ";\n".join(known)
    return None


def _dialect(base: str, scope: Scope, depth: int = 0) -> str | None:
    text = base.lower()
    for key, dialect in _HOOK_DIALECTS.items():
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
    headers = _kw(node, "headers")
    if method in {"GET", "HEAD", "OPTIONS"}:
        return Finding("safe", "http_get", [Reason(f"an HTTP {method} reads", snippet(node))])
    if isinstance(headers, ast.Dict):
        for key, value in zip(headers.keys, headers.values, strict=True):
            if isinstance(key, ast.Constant) and "idempotency" in str(key.value).lower():
                if _random(value, scope) or not _refs_run(value, scope):
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
    if name in _OPAQUE or ("subprocess" in name and attr in {o.split(".")[-1] for o in _OPAQUE}):
        return Finding(
            "unknown",
            "opaque_command",
            [Reason("a subprocess: what it runs is not readable here", snippet(node))],
            "replay_safe(task, reason=...) if the command is safe to repeat",
        )
    if name in {"requests.request", "httpx.request", "session.request"} or (
        attr == "request" and any(b in base for b in _HTTP_BASE)
    ):
        method = node.args[0] if node.args else _kw(node, "method")
        verb = str(method.value).upper() if isinstance(method, ast.Constant) else "POST"
        return _http(node, verb, scope)
    if attr in _HTTP_MUTATING | {"get", "head"} and (
        any(b in base for b in _HTTP_BASE) or name in {"post", "put", "patch"}
    ):
        if attr in {"get", "head"} and not any(
            b in base for b in ("requests", "httpx", "session", "client", "http", "api")
        ):
            return None  # dict.get and friends
        return _http(node, attr.upper(), scope)
    if attr == "Request" and ("urllib" in base or name == "Request"):
        method = _kw(node, "method")
        verb = (
            str(method.value).upper()
            if isinstance(method, ast.Constant)
            else ("POST" if _kw(node, "data") else "GET")
        )
        return _http(node, verb, scope)
    if attr == "HttpHook" or name.endswith("HttpHook"):
        method = _kw(node, "method")
        verb = str(method.value).upper() if isinstance(method, ast.Constant) else "POST"
        return _http(node, verb, scope) if verb not in {"GET", "HEAD"} else None
    if name in {"smtplib.SMTP", "smtplib.SMTP_SSL", "SMTP", "SMTP_SSL"}:
        return None  # the connection; sending is the finding
    if (
        attr in _NOTIFY_ATTRS
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
        attr in _PUBLISH_ATTRS
        or (attr == "send_message" and "sqs" in base)
        or ("producer" in base and attr == "send")
    ):
        return Finding(
            "risky",
            "queue_publish",
            [Reason("a message is published again on a re-run", snippet(node))],
            FIX_EFFECT.format(task=task),
        )
    if attr in _OBJECT_ATTRS:
        if _random(node, scope) or _random(node.func, scope):
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
        mode = _kw(node, "if_exists")
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
        replace = _kw(node, "replace")
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
    if attr in _JOB_ATTRS:
        if any(k.arg and _JOB_TOKENS.search(k.arg) for k in node.keywords):
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
    if attr in _READ_ATTRS and any(b in base for b in _SQL_BASE):
        return Finding("safe", "read_only", [Reason("a read", snippet(node))])
    return None


def _param_markers(node: ast.Call, scope: Scope) -> list[str]:
    """Markers of the placeholders whose parameter is a value of the run (``(ds,)``, ``{"day": ds}``)."""
    params = _kw(node, "parameters", "params", "vars") or (node.args[1] if len(node.args) > 1 else None)
    if isinstance(params, ast.Name) and params.id in scope.assigned:
        params = scope.assigned[params.id]
    out: list[str] = []
    if isinstance(params, ast.Tuple | ast.List):
        out += [f"{PARAM_MARK}{i}" for i, e in enumerate(params.elts) if _refs_run(e, scope)]
    elif isinstance(params, ast.Dict):
        for key, value in zip(params.keys, params.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and _refs_run(value, scope):
                out.append(f"{PARAM_MARK}{key.value}")
    return out


def _sql(node: ast.Call, base: str, scope: Scope) -> Finding | None:
    arg = _kw(node, "sql", "statement", "query") or (node.args[0] if node.args else None)
    text = scope.string_of(arg)
    sqlish = any(b in base for b in _SQL_BASE)
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
    autocommit = _kw(node, "autocommit")
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
    from airflow_crashsafe.scan.model import combine

    found = combine(new)
    found.reasons = [Reason(r.why, r.evidence or snippet(node)) for r in found.reasons]
    return found


def describe(value: Any) -> str:
    return repr(value)
