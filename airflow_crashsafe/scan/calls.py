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
from airflow_crashsafe.scan.http_reads import read_only_post
from airflow_crashsafe.scan.libraries import family_of_module
from airflow_crashsafe.scan.model import Finding, Reason, combine
from airflow_crashsafe.scan.sql import PARAM_MARK, classify_sql
from airflow_crashsafe.scan.sqlalchemy_core import ORM_APPENDS, core_statement, orm_call
from airflow_crashsafe.scan.writes import classify_write

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["classify_call"]


_ORIGIN_DIALECTS = {
    "google.cloud.bigquery": "bigquery", "snowflake": "snowflake", "databricks": "databricks",
    "psycopg": "postgres", "psycopg2": "postgres", "asyncpg": "postgres", "pg8000": "postgres",
    "pymysql": "mysql", "MySQLdb": "mysql", "mysql": "mysql", "redshift_connector": "redshift",
    "boto3": "redshift", "pyathena": "trino", "trino": "trino", "duckdb": "duckdb",
    "clickhouse_driver": "clickhouse", "clickhouse_connect": "clickhouse", "sqlite3": "sqlite",
    "pyodbc": "tsql", "pymssql": "tsql", "oracledb": "oracle", "cx_Oracle": "oracle",
}  # fmt: skip


def _dialect(base: str, scope: Scope, depth: int = 0) -> str | None:
    text = base.lower()
    for key, dialect in HOOK_DIALECTS.items():
        if key in text:
            return dialect
    root = base.split(".")[0].removesuffix("()")
    if depth < 4:
        with scope.lookup(root) as found:
            if found is not None:
                value, inner_scope = found
                inner = dotted(value.func) if isinstance(value, ast.Call) else dotted(value)
                found_dialect = _dialect(inner, inner_scope, depth + 1)
                if found_dialect:
                    return found_dialect
    if depth == 0 and root:
        origin = scope.origin(ast.Name(id=root, ctx=ast.Load())) or ""
        for prefix, dialect in _ORIGIN_DIALECTS.items():
            if origin == prefix or origin.startswith(prefix + "."):
                return dialect
    return scope.walk.dialect_hint if depth == 0 else None


def _body_text(node: ast.Call, scope: Scope) -> str:
    """The request body as far as it can be read (a dict literal, or the value a name holds)."""
    parts = []
    for value in (kw(node, "data", "json", "body", "content", "params", "query"), *node.args[1:2]):
        if value is None:
            continue
        if isinstance(value, ast.Name):
            with scope.lookup(value.id) as found:
                if found is not None:
                    value = found[0]
        parts.append(scope.string_of(value) or ast.unparse(value))
    return "\n".join(parts)


def _url_text(node: ast.Call, scope: Scope, arg: int = 0) -> str:
    value = kw(node, "url", "endpoint") or (node.args[arg] if len(node.args) > arg else None)
    if value is None:
        return ""
    return scope.string_of(value) or ast.unparse(value)


def _http(node: ast.Call, method: str, scope: Scope, url_arg: int = 0) -> Finding:
    headers = kw(node, "headers")
    if isinstance(headers, ast.Name):
        with scope.lookup(headers.id) as found:
            headers = found[0] if found is not None else headers
    if method in {"GET", "HEAD", "OPTIONS"}:
        return Finding("safe", "http_get", [Reason(f"an HTTP {method} reads", snippet(node))])
    if method == "POST":
        why = read_only_post(_url_text(node, scope, url_arg), _body_text(node, scope))
        if why is not None:
            return Finding("safe", "http_read", [Reason(why, snippet(node))])
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
                        FIX_HTTP.format(task=_effect_name(scope)),
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
        FIX_HTTP.format(task=_effect_name(scope)),
    )


def _effect_name(scope: Scope) -> str:
    """What to call the effect in a fix: the task's id in its own callable, else the helper's name."""
    return scope.walk.task_id if scope.depth == 0 else getattr(scope.fn, "__name__", "task")


def _family(node: ast.Call, scope: Scope) -> str | None:
    """The library family of the call's receiver (``http``, ``db``, ``cloud``, ...), None if not known."""
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    origin = scope.origin(receiver) if receiver is not None else None
    return family_of_module(origin) if origin else None


def classify_call(node: ast.Call, name: str, scope: Scope) -> Finding | None:
    """The finding of one call, or None when it reaches nothing outside (or is a user function)."""
    attr = name.rsplit(".", 1)[-1]
    base = name.rsplit(".", 1)[0].lower() if "." in name else ""
    task = _effect_name(scope)
    family = _family(node, scope) if base else None
    target = scope.resolve(node.func)
    if (
        target is not None
        and callable(target)
        and not isinstance(target, type)
        and scope.is_user_code(target)
    ):
        return None  # the team's own function or method (WarehouseHook.publish): walked, not named
    if name in OPAQUE or ("subprocess" in name and attr in {o.split(".")[-1] for o in OPAQUE}):
        return Finding(
            "unknown",
            "opaque_command",
            [Reason("a subprocess: what it runs is not readable here", snippet(node))],
            "replay_safe(task, reason=...) if the command is safe to repeat",
        )
    found = _http_call(node, name, attr, base, family, scope)
    if found is not None:
        return found
    if name in {"smtplib.SMTP", "smtplib.SMTP_SSL", "SMTP", "SMTP_SSL"}:
        return None  # the connection; sending is the finding
    if (
        attr in NOTIFY_ATTRS
        or (attr == "send_message" and "sqs" not in base and family != "queue")
        or ("slack" in base and attr in {"send", "send_text", "send_dict", "call"})
        or (base.endswith("messages") and attr == "create")
    ):
        return Finding(
            "risky",
            "notification",
            [Reason("a message is sent again on a re-run", snippet(node))],
            FIX_EFFECT.format(task=task),
        )
    if (
        attr in PUBLISH_ATTRS
        or (attr == "send_message" and "sqs" in base)
        or (attr in {"send", "send_and_wait", "produce"} and ("producer" in base or family == "queue"))
    ):
        return Finding(
            "risky",
            "queue_publish",
            [Reason("a message is published again on a re-run", snippet(node))],
            FIX_EFFECT.format(task=task),
        )
    found = classify_write(node, name, attr, scope)
    if found is not None:
        return found
    if attr in OBJECT_ATTRS and not (attr == "put" and family in {"pure", "http"}):
        return _object(node, scope)
    if attr in JOB_ATTRS:
        return _job(node, attr, base, scope)
    if attr in ORM_APPENDS | {"merge", "bulk_update_mappings"} and ("session" in base or family == "db"):
        return orm_call(node, attr)
    if attr in _BATCH_SQL and len(node.args) > 1:  # psycopg2.extras.execute_batch(cur, sql, rows)
        return _sql(node, "cur", scope, "db", arg=1)
    if attr in _SQL_ATTRS or (attr in _SQL_IF_CLIENT and family in {"db", "warehouse", "cloud", "hooks"}):
        if any(b in base for b in ("subprocess", "asyncio", "http")) or family in {"http", "pure"}:
            return None
        return _sql(node, base, scope, family)
    if (
        attr == "copy"
        and node.args
        and (scope.string_of(node.args[0]) or "").lstrip().upper().startswith("COPY")
    ):
        return _sql(node, base, scope, family)
    if attr in READ_ATTRS and (family in {"db", "warehouse"} or _sql_receiver(node, base, scope, family)):
        return Finding("safe", "read_only", [Reason("a read", snippet(node))])
    return None


#: Methods that run SQL given as their argument, on any receiver that may be a database client.
_SQL_ATTRS = {
    "execute", "executemany", "run", "run_sql", "execute_string", "execute_stream", "execute_statement",
    "batch_execute_statement", "execute_async", "copy_expert", "execute_query",
}  # fmt: skip
#: Functions taking a cursor first and the SQL second.
_BATCH_SQL = {"execute_batch", "execute_values", "execute_mogrify"}
#: Methods that run SQL only on a database or warehouse client (``bigquery.Client().query(sql)``).
_SQL_IF_CLIENT = {"query", "sql", "command"}


def _http_call(
    node: ast.Call, name: str, attr: str, base: str, family: str | None, scope: Scope
) -> Finding | None:
    """Requests through requests/httpx/urllib/sessions and Airflow's ``HttpHook``."""
    if family not in {None, "http", "user"} and not name.endswith("HttpHook"):
        hook = _constructor(node, scope)
        if hook is None or not dotted(hook.func).endswith("HttpHook"):
            return None
    if name in {"requests.request", "httpx.request", "session.request"} or (
        attr == "request" and (any(b in base for b in HTTP_BASE) or family == "http")
    ):
        method = node.args[0] if node.args else kw(node, "method")
        verb = str(method.value).upper() if isinstance(method, ast.Constant) else "POST"
        return _http(node, verb, scope, url_arg=1)
    if attr in HTTP_MUTATING | {"get", "head"} and (
        any(b in base for b in HTTP_BASE) or name in {"post", "put", "patch"} or family == "http"
    ):
        if (
            attr in {"get", "head"}
            and family != "http"
            and not any(b in base for b in ("requests", "httpx", "session", "client", "http", "api"))
        ):
            return None  # dict.get and friends
        return _http(node, attr.upper(), scope)
    if attr in {"Request", "urlopen"} and ("urllib" in base or name in {"Request", "urlopen"}):
        method = kw(node, "method")
        data = kw(node, "data") or (node.args[1] if len(node.args) > 1 else None)
        if attr == "urlopen" and isinstance(node.args[0] if node.args else None, ast.Call | ast.Name):
            return None  # urlopen(Request(...)): the Request is the finding
        verb = str(method.value).upper() if isinstance(method, ast.Constant) else ("POST" if data else "GET")
        return _http(node, verb, scope)
    if attr == "run":
        hook = _constructor(node, scope)
        if hook is not None and dotted(hook.func).endswith("HttpHook"):
            method = kw(hook, "method") or (hook.args[0] if hook.args else None)
            verb = str(method.value).upper() if isinstance(method, ast.Constant) else "POST"
            return _http(node, verb, scope)
    return None


def _constructor(node: ast.Call, scope: Scope) -> ast.Call | None:
    """The call that made the receiver of ``node`` (``HttpHook(method="POST")`` for ``hook.run``)."""
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    if isinstance(receiver, ast.Call):
        return receiver
    if isinstance(receiver, ast.Name):
        with scope.lookup(receiver.id) as found:
            if found is not None and isinstance(found[0], ast.Call):
                return found[0]
    return None


def _object(node: ast.Call, scope: Scope) -> Finding:
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
        [Reason("an object written under a name fixed by the run: a re-run overwrites it", snippet(node))],
    )


def _job(node: ast.Call, attr: str, base: str, scope: Scope) -> Finding:
    if any(k.arg and JOB_TOKENS.search(k.arg) for k in node.keywords):
        return Finding("safe", "job_keyed", [Reason("a job submitted with a client token", snippet(node))])
    if attr == "start_query_execution":  # Athena: a query that only reads writes only its result file
        found = _sql(node, base, scope, "cloud")
        if found is not None and found.verdict == "safe":
            return found
    return Finding(
        "risky",
        "job_submission",
        [Reason("an external job submitted again on a re-run", snippet(node))],
        FIX_JOB,
    )


def _param_markers(node: ast.Call, scope: Scope) -> list[str]:
    """Markers of the placeholders whose parameter is a value of the run (``(ds,)``, ``{"day": ds}``)."""
    params = kw(node, "parameters", "params", "vars") or (node.args[1] if len(node.args) > 1 else None)
    if isinstance(params, ast.Name):
        with scope.lookup(params.id) as found:
            params = found[0] if found is not None else params
    out: list[str] = []
    if isinstance(params, ast.Tuple | ast.List):
        out += [f"{PARAM_MARK}{i}" for i, e in enumerate(params.elts) if refs_run(e, scope)]
    elif isinstance(params, ast.Dict):
        for key, value in zip(params.keys, params.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and refs_run(value, scope):
                out.append(f"{PARAM_MARK}{key.value}")
    return out


def _is_hook_class(cls: object) -> bool:
    names = [c.__name__ for c in getattr(cls, "__mro__", ())]
    return "DbApiHook" in names or any(n.endswith("Hook") and n != "HttpHook" for n in names[:1])


def _sql_receiver(node: ast.Call, base: str, scope: Scope, family: str | None) -> bool:
    """True when the receiver runs SQL: a cursor, connection or hook by name, library, or class."""
    if any(b in base for b in SQL_BASE) or family in {"db", "warehouse", "hooks", "cloud"}:
        return True
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    if isinstance(receiver, ast.Call) and dotted(receiver.func) == "super":
        owner = (getattr(scope.fn, "__qualname__", "") or "").split(".")[0]
        return _is_hook_class(scope.globals.get(owner) if scope.bound is None else type(scope.bound))
    obj = scope.resolve(receiver) if isinstance(receiver, ast.Name | ast.Attribute) else None
    cls = obj if isinstance(obj, type) else type(obj) if obj is not None else None
    return cls is not None and _is_hook_class(cls)


def _sql(node: ast.Call, base: str, scope: Scope, family: str | None = None, arg: int = 0) -> Finding | None:
    target = scope.resolve(node.func)
    if target is not None and scope.is_user_code(target) and not base.startswith("super()"):
        return None  # the user's own run()/execute(): walked with its arguments instead
    statement = kw(
        node, "sql", "statement", "query", "Sql", "Sqls", "QueryString", "sql_query", "operation"
    ) or (node.args[arg] if len(node.args) > arg else None)
    text = scope.string_of(statement)
    sqlish = _sql_receiver(node, base, scope, family)
    if text is None:
        core = core_statement(statement, scope)
        if core is not None:
            return core
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if not sqlish or statement is None or attr in _SQL_IF_CLIENT:  # session.query(Model): the ORM
            return None
            return None
        return Finding(
            "unknown",
            "runtime_sql",
            [Reason("SQL built at run time: the scan cannot read it", snippet(node))],
            "if it only reads or is idempotent, replay_safe(task, reason=...); otherwise " + FIX_SQL,
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
