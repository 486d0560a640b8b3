"""Give a risky task crashsafe's protection in place, where that does not change what it does.

Two cases qualify (docs/scan.md, "The cluster policy"):

- an ``HttpOperator`` (not deferrable, not mapped) with a mutating method: its request runs inside
  :func:`~airflow_crashsafe.effects.effect` — intent in the ledger before it leaves, the outcome
  after — and carries the effect's key as ``Idempotency-Key``, the same in every attempt of the
  slot. Whether a retry may re-send after an unknown outcome follows the HTTP connection's extra
  ``crashsafe_honours_idempotency_keys``, as for ``IdempotentHttpOperator``; undeclared, it stops;
- a ``SQLExecuteQueryOperator`` on PostgreSQL or SQLite whose SQL is one statement writing one
  known table (no ``RETURNING``): it runs inside
  :func:`~airflow_crashsafe.fencing.fenced_transaction` on that table, so only the newest attempt
  commits and a retry of a committed slot does nothing.

The task's own ``execute`` is replaced on the instance; the wrapper works on the task instance the
task runner executes (``context["task"]``, a copy made for execution, with rendered fields).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_crashsafe.scan.model import Finding

__all__ = ["protect"]

_SQL_CATEGORIES = {"append", "increment", "generated_key_merge", "overwrite_not_atomic"}
_FENCEABLE = {"postgres", "sqlite"}


def _names(task: Any) -> list[str]:
    return [c.__name__ for c in type(task).__mro__]


def protect(task: Any, finding: Finding) -> str | None:
    """Protect ``task`` in place and say how, or None when it cannot be done without changing it."""
    if hasattr(task, "partial_kwargs"):  # a mapped task: its instances are built elsewhere
        return None
    names = _names(task)
    if (
        finding.category == "http_mutating"
        and "HttpOperator" in names
        and not getattr(task, "deferrable", False)
    ):
        task.execute = _ledgered_http
        task.crashsafe_protected_by = "policy_mode=protect: idempotency key and ledger"
        return "its request carries an idempotency key and is recorded in the ledger"
    if finding.category in _SQL_CATEGORIES and "SQLExecuteQueryOperator" in names:
        target = _single_write_target(task)
        if target is None:
            return None
        task.execute = _fenced_sql
        task.crashsafe_fence_target = target
        task.crashsafe_protected_by = f"policy_mode=protect: fenced transaction on {target}"
        return f"its statement runs in a fenced transaction on {target}"
    return None


def _single_write_target(task: Any) -> str | None:
    """The table written when the SQL is one INSERT/UPDATE/DELETE/MERGE without RETURNING."""
    import sqlglot
    from sqlglot import exp

    from airflow_crashsafe.scan.context import Renderer
    from airflow_crashsafe.scan.rules import conn_type_of
    from airflow_crashsafe.scan.sql import dialect_of, mark_placeholders

    conn_type = conn_type_of(getattr(task, "conn_id", None))
    if conn_type not in _FENCEABLE:
        return None
    sql = task.sql
    if isinstance(sql, list | tuple):
        if len(sql) != 1:
            return None
        sql = sql[0]
    try:
        text = str(Renderer(task.dag, task).render(sql))
        statements = [s for s in sqlglot.parse(mark_placeholders(text), read=dialect_of(conn_type)) if s]
    except Exception:
        return None
    if len(statements) != 1:
        return None
    stmt = statements[0]
    if not isinstance(stmt, exp.Insert | exp.Update | exp.Delete | exp.Merge) or stmt.args.get("returning"):
        return None
    table = stmt.this.find(exp.Table) if isinstance(stmt.this, exp.Expression) else None
    if table is None:
        return None
    return ".".join(p for p in (table.catalog, table.db, table.name) if p)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _ledgered_http(context: Any) -> Any:
    """An HttpOperator's execute inside ``effect()``, with the effect's key as Idempotency-Key."""
    from airflow.providers.http.hooks.http import HttpHook

    from airflow_crashsafe.effects.effect import effect
    from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA, unknown_outcome_policy
    from airflow_crashsafe.redaction import RedactionPolicy, body_fields

    task = context["task"]
    extra = HttpHook.get_connection(task.http_conn_id).extra_dejson
    on_unknown = unknown_outcome_policy(
        task.task_id, explicit=None, declared=None, connection=extra.get(HONOURS_KEYS_EXTRA)
    )
    policy = RedactionPolicy.of()
    endpoint = str(task.endpoint or "")
    payload = {
        "method": str(task.method).upper(),
        "endpoint": policy.endpoint(endpoint),
        "data": policy.body(task.data),
    }
    opaque = policy.opaque_digest(body_fields(task.data), endpoint=endpoint)
    if opaque is not None:  # path ids masked for reading as random still tell payloads apart
        payload["opaque_sha256"] = opaque
    with effect(
        f"http:{task.http_conn_id}", context=context, payload=payload, on_unknown_outcome=on_unknown
    ) as fx:
        if fx.pending:
            task.headers = {**dict(task.headers or {}), "Idempotency-Key": fx.key}
            fx.done(_jsonable(type(task).execute(task, context)))
    return fx.result


def _fenced_sql(context: Any) -> Any:
    """A SQLExecuteQueryOperator's one statement inside a fenced transaction on its table."""
    from airflow_crashsafe.fencing import fenced_transaction

    task = context["task"]
    sql = task.sql[0] if isinstance(task.sql, list | tuple) else task.sql
    with fenced_transaction(task.conn_id, task.crashsafe_fence_target, context=context) as tx:
        if tx.already_committed:
            return None
        if task.parameters:
            tx.cursor.execute(sql, task.parameters)
        else:
            tx.cursor.execute(sql)
    return None
