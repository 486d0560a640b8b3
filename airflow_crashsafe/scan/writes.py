"""Loads and file writes judged by how they write: append (risky) or replace (safe).

A re-run of an append adds the rows again; a re-run of an overwrite leaves what the first run
left. The disposition is read from the call as written, whatever the library:

- BigQuery's ``write_disposition`` (on the call, in its ``job_config`` or a job
  ``configuration``): ``WRITE_APPEND`` is risky, ``WRITE_TRUNCATE`` and ``WRITE_EMPTY`` are safe;
  a load job (``load_table_from_*``) appends unless told otherwise, a copy job does not;
- ``if_exists="append"`` (pandas ``to_sql``, ``to_gbq``) and ``mode="append"`` (Spark writers,
  ``write_deltalake``, awswrangler) are risky; ``replace`` / ``overwrite`` are safe;
- Snowflake's ``write_pandas`` appends unless ``overwrite=True``;
- streaming inserts (``insert_rows_json``, ``insert_all``), ``copy_from`` and ``bulk_load``
  append; ``open(path, "a")`` appends to a file.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from airflow_crashsafe.scan.call_names import FIX_SQL
from airflow_crashsafe.scan.exprs import dotted, kw, snippet
from airflow_crashsafe.scan.model import Finding, Reason

if TYPE_CHECKING:
    from airflow_crashsafe.scan.python_code import Scope

__all__ = ["classify_write", "disposition_finding"]

_DISPOSITION = re.compile(r"WRITE_(APPEND|TRUNCATE|EMPTY)")
#: Calls whose default, when no disposition is written, is to append.
_APPEND_BY_DEFAULT = {
    "load_table_from_uri", "load_table_from_file", "load_table_from_dataframe", "load_table_from_json",
}  # fmt: skip
_DISPOSED = _APPEND_BY_DEFAULT | {"copy_table", "query", "insert_job", "run_load", "run_query", "run_copy"}
_STREAMING = {"insert_rows_json", "insert_rows_from_dataframe", "insert_all", "copy_from", "bulk_load"}
_SPARK_SINKS = {
    "save",
    "saveAsTable",
    "save_as_table",
    "parquet",
    "csv",
    "json",
    "orc",
    "jdbc",
    "text",
    "insertInto",
}
_APPEND_MODES = {"append", "a"}
_SAFE_MODES = {
    "overwrite",
    "overwrite_partitions",
    "replace",
    "error",
    "errorifexists",
    "ignore",
    "fail",
    "w",
}
FIX_APPEND = (
    "load with a replacing disposition (WRITE_TRUNCATE of the run's partition, if_exists='replace', "
    "overwrite=True), or merge on the natural key: " + FIX_SQL
)


def _const(node: ast.expr | None, scope: Scope) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        return str(node.value)
    text = scope.string_of(node)
    if text is not None:
        return text
    return ast.unparse(node)


def _bound_text(node: ast.Call, scope: Scope) -> str:
    """The call's source, with the values its arguments' names are bound to (a job_config made earlier)."""
    parts = [ast.unparse(node)]
    for value in [*node.args, *(k.value for k in node.keywords)]:
        if isinstance(value, ast.Name):
            with scope.lookup(value.id) as found:
                if found is not None:
                    parts.append(ast.unparse(found[0]))
            for attr in ("write_disposition", "writeDisposition"):
                with scope.lookup(f"{value.id}.{attr}") as found:
                    if found is not None:
                        parts.append(f"write_disposition={ast.unparse(found[0])}")
    return "\n".join(parts)


def disposition_finding(text: str, *, appends_by_default: bool, evidence: str) -> Finding | None:
    """The finding of a warehouse write whose configuration reads as ``text``; None if it says nothing."""
    found = set(_DISPOSITION.findall(text))
    if "APPEND" in found or (not found and appends_by_default):
        why = "WRITE_APPEND" if "APPEND" in found else "a load job appends by default (no write_disposition)"
        return Finding(
            "risky", "append", [Reason(f"{why}: a re-run loads the rows again", evidence)], FIX_APPEND
        )
    if "TRUNCATE" in found:
        return Finding(
            "safe", "overwrite", [Reason("WRITE_TRUNCATE replaces the table (or partition)", evidence)]
        )
    if "EMPTY" in found:
        return Finding(
            "safe", "overwrite", [Reason("WRITE_EMPTY fails on a table that already has rows", evidence)]
        )
    return None


def classify_write(node: ast.Call, name: str, attr: str, scope: Scope) -> Finding | None:
    """The finding of a load or file write, or None when the call is not one."""
    if name in {"open", "io.open", "codecs.open"} or (
        attr == "open" and name != "open" and _is_path(node, scope)
    ):
        first = str(node.args[0].value) if node.args and isinstance(node.args[0], ast.Constant) else None
        if first is not None and 0 < len(first) <= 3 and set(first) <= set("rwabxt+"):
            mode: ast.expr | None = node.args[0]  # Path(p).open("a")
        else:
            mode = node.args[1] if len(node.args) > 1 else kw(node, "mode")
        text = _const(mode, scope) or "r"
        if "a" in text:
            return Finding(
                "risky",
                "append",
                [Reason(f"a file opened for append ({text!r}): a re-run appends again", snippet(node))],
                "write the file under a name fixed by the run with mode 'w', so a re-run replaces it",
            )
        return None
    if attr in _STREAMING:
        return _append(f"{attr}() appends the rows again on a re-run", node)
    if attr in _DISPOSED and (attr != "query" or kw(node, "job_config") is not None):
        text = _bound_text(node, scope)
        loads = attr in _APPEND_BY_DEFAULT or (attr in {"insert_job", "run_load"} and "load" in text)
        found = disposition_finding(text, appends_by_default=loads, evidence=snippet(node))
        if found is None and attr in {"copy_table", "run_copy"}:
            return _overwrite(
                "a copy job without a disposition (WRITE_EMPTY) fails on a table that holds rows", node
            )
        return found
    if attr == "write_pandas" or name.endswith("write_pandas"):
        if _is_true(kw(node, "overwrite")):
            return _overwrite("write_pandas(overwrite=True) replaces the table", node)
        return _append("write_pandas appends unless overwrite=True: a re-run loads the rows again", node)
    if attr == "insert_rows":
        if _is_true(kw(node, "replace")):
            return Finding(
                "safe",
                "natural_key_merge",
                [Reason("insert_rows(replace=True) upserts on the key", snippet(node))],
            )
        return _append("insert_rows appends the rows again on a re-run", node)
    return _mode_write(node, attr, scope)


def _mode_write(node: ast.Call, attr: str, scope: Scope) -> Finding | None:
    """``if_exists=`` / ``mode=`` on a writer (pandas, Spark, delta, awswrangler)."""
    if attr in {"to_sql", "to_gbq"} or (attr.startswith("to_") and kw(node, "if_exists") is not None):
        how = _const(kw(node, "if_exists"), scope) or "fail"
    elif kw(node, "mode") is not None and attr.startswith(("to_", "write", "save", "insert", "copy")):
        how = _const(kw(node, "mode"), scope) or ""
    elif attr in _SPARK_SINKS and "write" in dotted(node.func):
        how = _chained_mode(node, scope) or ("append" if attr == "insertInto" else "errorifexists")
        if attr == "insertInto" and _is_true(kw(node, "overwrite")):
            how = "overwrite"
    else:
        return None
    how = how.strip("'\"").lower()
    if how in _APPEND_MODES:
        return _append(f"{attr}() in append mode adds the rows again on a re-run", node)
    if how in _SAFE_MODES:
        return _overwrite(f"{attr}() with {how!r} does not add rows twice", node)
    return None


def _is_true(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _append(why: str, node: ast.Call) -> Finding:
    return Finding("risky", "append", [Reason(why, snippet(node))], FIX_APPEND)


def _overwrite(why: str, node: ast.Call) -> Finding:
    return Finding("safe", "overwrite", [Reason(why, snippet(node))])


def _chained_mode(node: ast.Call, scope: Scope) -> str | None:
    """The ``.mode("append")`` earlier in a writer chain (``df.write.mode("append").parquet(p)``)."""
    current: ast.AST = node.func
    while isinstance(current, ast.Attribute | ast.Call):
        if (
            isinstance(current, ast.Call)
            and isinstance(current.func, ast.Attribute)
            and current.func.attr == "mode"
        ):
            return _const(current.args[0] if current.args else None, scope)
        current = current.func if isinstance(current, ast.Call) else current.value
    return None


def _is_path(node: ast.Call, scope: Scope) -> bool:
    """``Path(p).open("a")`` or a filesystem's ``fs.open(p, "a")``, not ``webbrowser.open``."""
    receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
    origin = scope.origin(receiver) or ""
    return origin.startswith(("pathlib", "fsspec", "s3fs", "gcsfs", "smart_open", "adlfs", "io")) or (
        receiver is not None and "path" in ast.unparse(receiver).lower()
    )
