"""Which library a call goes into, and what the scan knows about it: fail closed.

A call the named rules of :mod:`.calls` did not recognise, on a value whose origin is known
(:meth:`~airflow_crashsafe.scan.scope.Names.origin`), is judged by its library's family:

- pure modules (an explicit allow-list: the standard library's data modules, pandas, numpy,
  logging, Airflow's models) have no side effect;
- HTTP and database drivers reach outside only through the calls :mod:`.calls` recognises (a
  request method, SQL); their other methods only make handles or read answers;
- cloud SDKs and queue, search, cache and document-store clients are judged by verb: reads
  (``get_*``, ``list_*``, ``describe_*``, ``download*``, ``search``) are safe, deletes are safe,
  keyed writes are safe, increments and appends are risky; any other verb is ``unknown``;
- a library the scan has no rule for (an installed package, a module that is not even
  installed where the scan runs) is ``unknown``: the scan cannot see into it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.call_names import FIX_EFFECT
from airflow_crashsafe.scan.exprs import is_random, kw, snippet
from airflow_crashsafe.scan.model import Finding, Reason

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = [
    "FACTORIES",
    "FIX_OPAQUE",
    "LIBRARY_ROOTS",
    "family_of_module",
    "is_factory",
    "judge_library_call",
    "opaque",
]

#: Calls that make a handle to work with (a client, a connection, a cursor, a bucket): no effect.
FACTORIES = frozenset(
    {
        "client", "resource", "Session", "session", "connect", "get_conn", "get_connection",
        "get_client", "get_session", "get_hook", "cursor", "bucket", "get_bucket", "blob",
        "get_blob", "dataset", "collection", "get_collection", "database", "get_database",
        "get_database_client", "get_container_client", "get_blob_client", "get_queue_client",
        "get_topic_client", "channel", "pipeline", "begin", "get_sqlalchemy_engine",
        "create_engine", "get_paginator", "get_waiter", "build", "get_queue_by_name",
        "get_table_client", "topic_path", "subscription_path", "Table", "document", "sql_engine",
        "get_uri", "connection", "raw_connection", "get_cursor", "get_conn_value", "engine",
        "login", "logout", "quit", "cwd", "chdir", "ehlo", "starttls", "set_pasv",
        "set_missing_host_key_policy", "load_system_host_keys",
    }
)  # fmt: skip

#: Top-level modules with no side effect outside the worker (and Airflow's own models and utils).
_PURE = frozenset(
    {
        "json", "datetime", "time", "math", "cmath", "logging", "re", "collections", "itertools",
        "functools", "typing", "typing_extensions", "decimal", "fractions", "statistics", "string",
        "textwrap", "uuid", "random", "secrets", "hashlib", "hmac", "base64", "binascii", "copy",
        "pprint", "calendar", "zoneinfo", "enum", "dataclasses", "operator", "numbers", "io", "csv",
        "gzip", "zlib", "bz2", "lzma", "zipfile", "tarfile", "struct", "array", "heapq", "bisect",
        "contextlib", "abc", "warnings", "traceback", "inspect", "types", "weakref", "platform",
        "sys", "os", "pathlib", "shutil", "glob", "fnmatch", "tempfile", "email", "html", "xml",
        "ipaddress", "locale", "unicodedata", "difflib", "shlex", "argparse", "configparser",
        "getpass", "threading", "concurrent", "asyncio", "queue", "pickle", "builtins", "posixpath",
        "numpy", "pandas", "pyarrow", "polars", "scipy", "sklearn", "statsmodels", "pendulum",
        "dateutil", "pytz", "tzlocal", "jinja2", "yaml", "toml", "tomllib", "tomli", "jsonschema",
        "pydantic", "attr", "attrs", "marshmallow", "tabulate", "humanize", "croniter", "simplejson",
        "orjson", "ujson", "xmltodict", "lxml", "bs4", "markdown", "chardet", "dateparser", "faker",
        "tenacity", "structlog", "loguru", "rich", "tqdm", "six", "more_itertools", "toolz",
        "cachetools", "jmespath", "jsonpath_ng", "openpyxl", "xlrd", "xlsxwriter", "PIL",
        "matplotlib", "seaborn", "plotly", "shapely", "jwt", "isodate", "iso8601", "ciso8601",
        "babel", "phonenumbers", "pycountry", "msgpack", "avro", "fastavro", "sqlglot", "sqlparse",
        "urllib.parse", "airflow_crashsafe",
    }
)  # fmt: skip
_PURE_AIRFLOW = ("airflow.models", "airflow.sdk", "airflow.utils", "airflow.macros", "airflow.exceptions",
                 "airflow.configuration", "airflow.hooks.base", "airflow.decorators", "airflow.operators",
                 "airflow.timetables", "airflow.datasets", "airflow.assets", "airflow.io",
                 "airflow.providers.common.compat", "airflow.providers.standard")  # fmt: skip

#: Module prefix -> family (the longest prefix wins).
_FAMILIES = {
    "requests": "http", "httpx": "http", "urllib": "http", "urllib3": "http", "aiohttp": "http",
    "http": "http", "requests_toolbelt": "http", "psycopg2": "db", "psycopg": "db", "pymysql": "db",
    "MySQLdb": "db", "mysql": "db", "sqlite3": "db", "pyodbc": "db", "cx_Oracle": "db", "oracledb": "db",
    "pymssql": "db", "redshift_connector": "db", "teradatasql": "db", "trino": "db", "pyhive": "db",
    "sqlalchemy": "db", "duckdb": "db", "clickhouse_driver": "db", "clickhouse_connect": "db",
    "pyathena": "db", "snowflake.connector": "db", "snowflake.sqlalchemy": "db", "databricks.sql": "db",
    "vertica_python": "db", "pg8000": "db", "asyncpg": "db", "ibis": "db", "snowflake": "warehouse",
    "databricks": "warehouse", "pyspark": "warehouse", "boto3": "cloud", "botocore": "cloud",
    "aiobotocore": "cloud", "awswrangler": "cloud", "s3fs": "cloud", "google": "cloud", "gcsfs": "cloud",
    "azure": "cloud", "adlfs": "cloud", "pandas_gbq": "cloud", "googleapiclient": "builder",
    "kafka": "queue", "confluent_kafka": "queue", "aiokafka": "queue", "pika": "queue", "kombu": "queue",
    "nats": "queue", "pulsar": "queue", "celery": "queue", "stomp": "queue", "paho": "queue",
    "elasticsearch": "search", "opensearchpy": "search", "elasticsearch_dsl": "search", "redis": "cache",
    "pymemcache": "cache", "memcache": "cache", "pymongo": "documents", "motor": "documents",
    "paramiko": "files", "pysftp": "files", "ftplib": "files", "smbclient": "files", "fsspec": "files",
    "smtplib": "messages", "slack_sdk": "messages", "slack": "messages", "twilio": "messages",
    "sendgrid": "messages", "telegram": "messages", "discord": "messages", "pymsteams": "messages",
    "airflow.providers": "hooks", "airflow.api": "hooks", "airflow": "pure", "socket": "network",
    "ssl": "network", "xmlrpc": "network", "imaplib": "network", "poplib": "network",
    "telnetlib": "network", "subprocess": "network", "multiprocessing": "pure",
}  # fmt: skip
LIBRARY_ROOTS = tuple(
    str(Path(p).resolve())
    for p in {
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        sysconfig.get_paths()["stdlib"],
    }
)

#: Verbs that only read (by prefix), delete, or make a handle, in the families judged by verb.
_READ = re.compile(
    r"^(get|list|describe|head|download|read|search|msearch|query|scan|select|batch_get|lookup|exists|"
    r"fetch|find|count|aggregate|distinct|access|retrieve|check|filter|generate_presigned|paginate|"
    r"can_paginate|wait|result|info|ping|scroll|mget|explain|validate|test|estimate|poll_status|"
    r"keys|ttl|smembers|lrange|zrange|hget|hgetall|hkeys|hvals|hlen|llen|scard|zcard|zscore|"
    r"to_dataframe|to_arrow|to_pandas|json|raise_for_status|close|flush|commit|rollback|cancel|"
    r"assume_role|set_autocommit|get_autocommit)",
    re.IGNORECASE,
)
_DELETE = re.compile(r"^(delete|remove|drop|hdel|srem|zrem|unlink)", re.IGNORECASE)
_KEYED = {
    "set", "mset", "setex", "psetex", "hset", "hmset", "sadd", "zadd", "put_item", "upsert_item",
    "replace_one", "put_parameter", "queue_declare", "exchange_declare", "queue_bind", "create_index",
    "expire", "expireat", "persist", "put_object_tagging", "put_bucket_policy", "set_blob_metadata",
    "patch", "setnx", "getset",
}  # fmt: skip
_INCREMENT = {"incr", "incrby", "incrbyfloat", "decr", "decrby", "hincrby", "hincrbyfloat", "zincrby"}
_APPEND = {
    "insert_one", "insert_many", "insert_rows_json", "insert_rows", "insert_rows_from_dataframe",
    "insert_all", "add", "append", "append_rows", "create_item", "send_batch",
}  # fmt: skip
#: Object stores and file servers: writes under a name (judged by whether the name is random).
_OBJECT_VERBS = {
    "storbinary",
    "storlines",
    "upload",
    "store_file",
    "copy",
    "rewrite",
    "compose",
    "move",
    "copy_file",
    "copy_blob",
    "put_file",
}
_NOTIFY_VERBS = {
    "send",
    "send_event",
    "create_event",
    "notify",
    "post",
    "create_alert",
    "trigger",
    "send_message",
}
_NOTIFIERS = (
    "pagerduty",
    "opsgenie",
    "slack",
    "discord",
    "telegram",
    "twilio",
    "sendgrid",
    "smtp",
    "teams",
    "chime",
)
_INC_DOC = re.compile(r"\$inc\b|\$push\b|\$addToSet\b|\bADD\s+[#:\w]|(\w+)\s*=\s*\1\s*[+-]|Increment\(|\+=")

FIX_OPAQUE = (
    "read what the call does; if running it twice is harmless, replay_safe(task, reason=...); "
    'otherwise wrap it: with effect("{task}", payload=...) as fx: if fx.pending: ...; fx.done(result)'
)


def _location(module: str) -> str:
    """``user`` (the DAGs' own code), ``library`` (installed or standard), or ``missing``.

    Loaded modules are looked up every time (a module the static path registers later, or one a
    DAG file imports later, must not keep an earlier ``missing``); only the file-system search for
    a module that is not loaded is cached.
    """
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        loaded = sys.modules.get(".".join(parts[:i]))
        if loaded is not None:
            return _where(getattr(loaded, "__file__", None), parts[0])
    return _where_unloaded(parts[0])


@functools.cache
def _where_unloaded(top: str) -> str:
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    return "missing" if spec is None else _where(spec.origin, top)


@functools.cache
def _where(path: str | None, top: str) -> str:
    if path is None or top in sys.builtin_module_names:
        return "library"
    return "library" if str(Path(path).resolve()).startswith(LIBRARY_ROOTS) else "user"


def is_factory(name: str) -> bool:
    """True for a call that makes a handle: a class (``Client(...)``), a factory, ``from_*`` constructors."""
    return name in FACTORIES or name[:1].isupper() or name.startswith("from_")


def family_of_module(module: str) -> str | None:
    """The family of a module path (``user``, ``pure``, ``http``, ``cloud``, ...); None: unknown library."""
    named = _named_family(module)
    return _by_location(module) if named == "" else named


@functools.cache
def _named_family(module: str) -> str:
    """The family the tables give a module, ``""`` when they say nothing (then: where it lives)."""
    if module == "builtins" or module.startswith(_PURE_AIRFLOW) or module.startswith("urllib.parse"):
        return "pure"
    found = max((p for p in _FAMILIES if module == p or module.startswith(p + ".")), key=len, default=None)
    if found is not None and found != "airflow":
        return _FAMILIES[found]
    if module.split(".")[0] in _PURE or found == "airflow":
        return "pure"
    return ""


def _by_location(module: str) -> str | None:
    top = module.split(".")[0]
    where = _location(module)
    if where == "user":
        return "user"
    if where == "library" and top in sys.stdlib_module_names:
        return "pure"
    return None


def opaque(node: ast.Call, what: str, scope: Scope) -> Finding:
    task = getattr(scope.fn, "__name__", "task")
    return Finding(
        "unknown",
        "opaque_library_call",
        [Reason(f"{what}: the scan cannot see what it does", snippet(node))],
        FIX_OPAQUE.format(task=task),
    )


def _read(node: ast.Call) -> Finding:
    return Finding("safe", "read_only", [Reason("a read", snippet(node))])


def judge_library_call(node: ast.Call, attr: str, origin: str, scope: Scope) -> Finding | None:
    """The finding of a call into ``origin``'s library that no named rule recognised."""
    family = family_of_module(origin)
    if family in {"pure", "user", "http", "db"} or is_factory(attr):
        return None
    if family == "builder":  # googleapiclient: service.x().y(...).execute()
        return _builder(node, attr, scope)
    if family in {
        "cloud",
        "warehouse",
        "queue",
        "search",
        "cache",
        "documents",
        "files",
        "hooks",
        "messages",
    }:
        found = _by_verb(node, attr, scope)
        if found is not None or attr[:1].isupper():
            return found
    top = origin.split(".")[0]
    return opaque(
        node,
        f"a call into {top} ({attr})" if family else f"a call into {top}, a library no rule knows",
        scope,
    )


def _by_verb(node: ast.Call, attr: str, scope: Scope) -> Finding | None:
    if _READ.match(attr) and attr not in _APPEND:
        return _read(node)
    if _DELETE.match(attr):
        return Finding(
            "safe", "delete", [Reason("a delete: repeating it removes nothing more", snippet(node))]
        )
    if attr in _INCREMENT:
        return Finding(
            "risky", "increment", [Reason("an increment adds again on a re-run", snippet(node))], _fix(scope)
        )
    if attr in {"update_item", "update_one", "update_many", "find_one_and_update", "update"}:
        if _INC_DOC.search(ast.unparse(node)):
            return Finding(
                "risky",
                "increment",
                [Reason("an update that adds to a value adds again", snippet(node))],
                _fix(scope),
            )
        if attr != "update" or node.args or kw(node, "doc", "body", "document", "id"):
            return Finding(
                "safe",
                "idempotent_update",
                [Reason("an update that sets values: a re-run sets the same", snippet(node))],
            )
        return None
    if attr in _KEYED or (attr == "index" and kw(node, "id")):
        if is_random(node, scope):
            return Finding(
                "risky",
                "append",
                [Reason("a write under a random key adds another on a re-run", snippet(node))],
                _fix(scope),
            )
        why = "a write by key: a re-run overwrites the same entry"
        return Finding("safe", "keyed_write", [Reason(why, snippet(node))])
    if attr in _OBJECT_VERBS:
        random = is_random(node, scope)
        why = "an object copied or uploaded under a " + (
            "random name: a re-run writes another"
            if random
            else "name fixed by the run: a re-run overwrites it"
        )
        return Finding(
            "risky" if random else "safe",
            "object_write_random" if random else "object_write_fixed",
            [Reason(why, snippet(node))],
            _fix(scope) if random else "",
        )
    if attr in _NOTIFY_VERBS and any(s in origin_hint(scope, node) for s in _NOTIFIERS):
        return Finding(
            "risky",
            "notification",
            [Reason("a notification is sent again on a re-run", snippet(node))],
            _fix(scope),
        )
    if attr in _APPEND or attr == "index":
        return Finding(
            "risky",
            "append",
            [Reason(f"{attr}() adds new records again on a re-run", snippet(node))],
            _fix(scope),
        )
    return None


def origin_hint(scope: Scope, node: ast.Call) -> str:
    """The lower-cased module the call's receiver comes from ('' when not known)."""
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else node.func
    return (scope.origin(receiver) or "").lower()


def _builder(node: ast.Call, attr: str, scope: Scope) -> Finding | None:
    if attr != "execute":
        return None
    inner = node.func.value if isinstance(node.func, ast.Attribute) else None
    verb = inner.func.attr if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) else ""
    if verb == "send":
        return Finding(
            "risky",
            "notification",
            [Reason("a message is sent again on a re-run", snippet(node))],
            _fix(scope),
        )
    return _by_verb(node, verb, scope) or opaque(node, f"a Google API call ({verb or attr})", scope)


def _fix(scope: Scope) -> str:
    return FIX_EFFECT.format(task=getattr(scope.fn, "__name__", "task"))
