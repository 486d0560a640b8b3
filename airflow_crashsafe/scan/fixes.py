"""The fix the scan names for a task, written so that it works where it is applied.

A fix is only useful if, pasted into the DAG, it parses and runs and keeps the DAG doing its job:

- an HTTP call becomes an ``IdempotentHttpOperator`` with the task's own arguments (a read such
  as a token request gets no fix at all: a ledger would skip it on a replay and leave the tasks
  that need a fresh answer without one);
- a ``TriggerDagRunOperator`` gets a run-derived ``trigger_run_id`` *and*
  ``skip_when_already_exists=True`` (without it a re-run fails with ``DagRunAlreadyExists``);
- SQL gets crashsafe's fenced operators only on the engines they support (PostgreSQL, SQLite,
  MySQL/MariaDB, DuckDB, Snowflake); elsewhere it is told how to rewrite the statement;
- ``effect()`` needs a task's context: code that also serves as a DAG's or task's callback
  (``on_failure_callback``...) keeps its body, and the task that calls it wraps the call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "FENCED_DIALECTS",
    "callback_functions",
    "effect_fix_for_callback",
    "http_operator_fix",
    "sql_fixes",
    "trigger_fix",
]

#: sqlglot dialects of the engines crashsafe's fenced SQL operators write to (docs/databases.md).
FENCED_DIALECTS = frozenset({"postgres", "sqlite", "mysql", "duckdb", "snowflake", None})
_CALLBACKS = ("on_failure_callback", "on_success_callback", "sla_miss_callback", "on_retry_callback",
              "on_execute_callback", "on_skipped_callback")  # fmt: skip


def _kwargs(pairs: Iterable[tuple[str, Any]]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in pairs if v not in (None, {}, ""))


def http_operator_fix(task: Any, method: str, endpoint: str, conn: str, data: Any, headers: Any) -> str:
    """``IdempotentHttpOperator(...)`` with the task's own id, connection, endpoint, body and headers."""
    kept = {k: v for k, v in dict(headers or {}).items() if "idempotency" not in str(k).lower()}
    body = ("json", data) if isinstance(data, dict | list) and _json_content(kept) else ("data", data)
    args = _kwargs(
        [
            ("task_id", getattr(task, "task_id", None)),
            ("http_conn_id", conn),
            ("endpoint", endpoint),
            ("method", method),
            body,
            ("headers", kept),
        ]
    )
    return (
        f"IdempotentHttpOperator({args}, target_honours_keys=False) "
        "(from airflow_crashsafe.operators.http; True once the vendor is known to honour Idempotency-Key) "
        "— or [crashsafe] policy_mode = protect"
    )


def _json_content(headers: dict[Any, Any]) -> bool:
    return any(str(k).lower() == "content-type" and "json" in str(v).lower() for k, v in headers.items())


def trigger_fix(task: Any) -> str:
    target = getattr(task, "trigger_dag_id", None) or "<dag>"
    run_id = getattr(task, "trigger_run_id", None) or f"{{{{ run_id }}}}_{target}"
    args = _kwargs(
        [("task_id", getattr(task, "task_id", None)), ("trigger_dag_id", target), ("trigger_run_id", run_id)]
    )
    return (
        f"TriggerDagRunOperator({args}, skip_when_already_exists=True): a re-run finds the run it "
        "triggered and skips (tasks after it need trigger_rule='none_failed' to run after a skip)"
    )


def sql_fixes(conn: Any, table: str, dialect: str | None) -> dict[str, str]:
    """Category -> fix for SQL on ``conn``: crashsafe's operators where they run, a rewrite elsewhere."""
    if dialect not in FENCED_DIALECTS:
        merge = (
            f"rewrite it as MERGE INTO {table} USING (<its SELECT>) ON <the business key> "
            "WHEN MATCHED THEN UPDATE ... WHEN NOT MATCHED THEN INSERT ..."
        )
        overwrite = (
            f"replace the run's partition of {table} in one transaction "
            "(BEGIN; DELETE ... WHERE <day> = '{{ ds }}'; INSERT ...; COMMIT)"
        )
        if dialect == "bigquery":
            overwrite = (
                f"load into the run's partition of {table} with WRITE_TRUNCATE, or MERGE on the business key"
            )
        return {
            "append": f"{merge}, or {overwrite}",
            "merge": f"{merge} with a key the source carries, not one it generates",
            "increment": f"{overwrite}: recompute the total from the source instead of adding to it",
            "overwrite": overwrite,
        }
    where = f"conn_id={conn!r}, target_table={table!r}"
    overwrite = f"PartitionOverwriteOperator({where}, partition={{'day': '{{{{ ds }}}}'}}, sql=<its SELECT>)"
    return {
        "append": f"NaturalKeyMergeOperator({where}, sql=<its SELECT>, natural_key=[<the business key>]) "
        f"or {overwrite}",
        "merge": f"NaturalKeyMergeOperator({where}, sql=<the source>, natural_key=[<the business key>]) "
        "(it refuses generated keys)",
        "increment": f"FencedSQLOperator(conn_id={conn!r}, target={table!r}, sql=<the statements>) "
        "(a committed slot is not run again)",
        "overwrite": overwrite,
    }


def callback_functions(dag: Any) -> set[int]:
    """The ids of the functions the DAG or its tasks use as callbacks (they run without a task context)."""
    found: set[int] = set()
    holders = [dag, *getattr(dag, "tasks", [])]
    for holder in holders:
        for name in _CALLBACKS:
            try:
                value = getattr(holder, name, None)
            except Exception:
                continue
            for fn in value if isinstance(value, list | tuple) else [value]:
                if callable(fn):
                    found.add(id(fn))
    return found


def effect_fix_for_callback(function: str, task_id: str) -> str:
    return (
        f"leave {function}() as it is: it also runs as a DAG or task callback, where effect() has no "
        f"task context; in the task, call it inside effect(): @task def {task_id}(**context): "
        f'with effect("{task_id}", context=context) as fx: if fx.pending: {function}(context); fx.done()'
    )
