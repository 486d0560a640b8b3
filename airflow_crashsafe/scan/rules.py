"""The verdict on one task, by what its operator is (docs/scan.md, "How a task is judged").

Order: crashsafe's own operators and ``replay_safe`` with a reason (protected); then the
operator's kind — SQL (its statements, :mod:`.sql`), HTTP (method and idempotency header), shell
(:mod:`.bash`), Python (the callable's source, :mod:`.python_code`), notifications (risky),
containers (unknown), sensors and no-ops (safe). A custom operator of the user's own is judged by
the source of its ``execute``; an operator from a library no rule knows is unknown.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from typing import Any
from urllib.parse import urlparse

from airflow_crashsafe.scan.bash import classify_bash
from airflow_crashsafe.scan.context import MARKERS, Renderer
from airflow_crashsafe.scan.custom_ops import judge_custom, judge_own_execute
from airflow_crashsafe.scan.fixes import callback_functions, http_operator_fix, sql_fixes, trigger_fix
from airflow_crashsafe.scan.http_reads import read_only_post
from airflow_crashsafe.scan.model import Finding, Reason, combine
from airflow_crashsafe.scan.python_code import analyze_callable
from airflow_crashsafe.scan.sql import PARAM_MARK, classify_sql, dialect_of
from airflow_crashsafe.scan.static_classes import unresolved_reason

__all__ = ["classify_task", "conn_type_of", "operator_path"]

_NOTIFIERS = (
    "Email",
    "Slack",
    "Sns",
    "Sms",
    "Teams",
    "Discord",
    "Telegram",
    "PagerDuty",
    "Opsgenie",
    "Chime",
    "Twilio",
)
_CONTAINERS = (
    "KubernetesPodOperator",
    "DockerOperator",
    "EcsRunTaskOperator",
    "DockerSwarmOperator",
    "_KubernetesDecoratedOperator",
    "_DockerDecoratedOperator",
)
_PYTHON = (
    "PythonOperator",
    "_PythonDecoratedOperator",
    "BranchPythonOperator",
    "ShortCircuitOperator",
    "PythonSensor",
    "PythonVirtualenvOperator",
    "ExternalPythonOperator",
    "_PythonVirtualenvDecoratedOperator",
    "_BranchPythonDecoratedOperator",
    "_ShortCircuitDecoratedOperator",
)
_SAFE = (
    "EmptyOperator",
    "LatestOnlyOperator",
    "BranchDateTimeOperator",
    "BranchDayOfWeekOperator",
    "SmoothOperator",
)
_TABLE = "\x00table"
#: Where SQL operators (and the Airflow 2 ones they replace) keep their connection id.
_CONN_ARGS = ("conn_id", "postgres_conn_id", "mysql_conn_id", "snowflake_conn_id", "redshift_conn_id",
              "mssql_conn_id", "oracle_conn_id", "trino_conn_id", "sqlite_conn_id", "databricks_conn_id",
              "duckdb_conn_id", "gcp_conn_id")  # fmt: skip
_NAME_DIALECT = (
    "postgres",
    "mysql",
    "snowflake",
    "bigquery",
    "redshift",
    "mssql",
    "sqlite",
    "trino",
    "oracle",
    "databricks",
)


def _operator_class(task: Any) -> type:
    cls = getattr(task, "operator_class", None)  # a MappedOperator
    return cls if isinstance(cls, type) else type(task)


def operator_path(task: Any) -> str:
    cls = _operator_class(task)
    return f"{cls.__module__}.{cls.__qualname__}"


def _mro_names(task: Any) -> list[str]:
    return [c.__name__ for c in _operator_class(task).__mro__]


def _arg(task: Any, name: str, default: Any = None) -> Any:
    """An operator argument, also from a mapped task's partial or expand arguments."""
    partial = getattr(task, "partial_kwargs", None)
    if partial is not None:
        if name in partial:
            return partial[name]
        value = getattr(getattr(task, "expand_input", None), "value", None)
        if isinstance(value, dict) and name in value:
            return value[name]
        try:  # a mapped TaskFlow task keeps its callable as an attribute
            return getattr(task, name, default)
        except Exception:
            return default
    return getattr(task, name, default)


@functools.cache
def conn_type_of(conn_id: str | None) -> str | None:
    """The connection's type from ``AIRFLOW_CONN_*``, else Airflow's secrets, else its name."""
    if not conn_id:
        return None
    raw = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if raw:
        if raw.lstrip().startswith("{"):
            try:
                return str(json.loads(raw).get("conn_type") or "") or None
            except ValueError:
                return None
        scheme = urlparse(raw).scheme.replace("-", "_")
        return "postgres" if scheme in {"postgresql", "postgres"} else scheme or None
    try:  # a deployment's secrets backend or metadata DB
        from airflow.models.connection import Connection

        return str(Connection.get_connection_from_secrets(conn_id).conn_type)
    except Exception:
        lowered = conn_id.lower()
        return next((name for name in _NAME_DIALECT if name in lowered), None)


def _protected(task: Any) -> Finding | None:
    if operator_path(task).startswith("airflow_crashsafe."):
        return Finding(
            "protected",
            "crashsafe_operator",
            [Reason(f"a crashsafe operator ({_operator_class(task).__name__})")],
        )
    if getattr(task, "crashsafe_protected_by", None):
        return Finding("protected", "policy_protected", [Reason(str(task.crashsafe_protected_by))])
    if getattr(task, "crashsafe_replay_safe", False):
        reason = str(getattr(task, "crashsafe_replay_safe_reason", "") or "")
        if reason:
            return Finding("protected", "declared_replay_safe", [Reason(f"declared replay-safe: {reason}")])
    return None


def classify_task(task: Any, dag: Any) -> Finding:
    """The task's verdict, category, reasons and fix (nothing is executed or connected to)."""
    found = _protected(task)
    if found is not None:
        return found
    names = _mro_names(task)
    try:
        finding = _by_kind(task, dag, names)
    except Exception as exc:  # a template that does not render, a value of an odd type
        finding = Finding(
            "unknown",
            "unreadable_task",
            [Reason(f"the scan could not read the task: {type(exc).__name__}: {exc}"[:300])],
        )
    if getattr(task, "crashsafe_replay_safe", False) and finding.verdict in {"risky", "unknown"}:
        finding.reasons.append(
            Reason("replay_safe(...) is given without a reason: say why running it twice is harmless")
        )
    return finding


def _by_kind(task: Any, dag: Any, names: list[str]) -> Finding:
    if any(n in _SAFE for n in names):
        return Finding("safe", "no_op", [Reason(f"{names[0]} has no side effect")])
    if "BaseSQLOperator" in names and any("Check" in n for n in names[:2]):
        return Finding("safe", "read_only", [Reason(f"{names[0]} only reads")])
    if any(n in _PYTHON for n in names):
        return _python(task, dag)
    if "BaseSensorOperator" in names:
        return Finding("safe", "sensor", [Reason(f"{names[0]} polls; it writes nothing")])
    if any(n in _CONTAINERS for n in names):
        return Finding(
            "unknown",
            "opaque_container",
            [Reason(f"{names[0]} runs an image whose effect is not readable here")],
            "replay_safe(task, reason=...) if the container is idempotent; "
            "otherwise make it key its writes by the run",
        )
    if any(n in {"BashOperator", "_BashDecoratedOperator"} for n in names):
        return _bash(task, dag, names)
    if any(n.startswith(_NOTIFIERS) for n in names):
        return _notifier(task, dag, names)
    if any(n in {"HttpOperator", "SimpleHttpOperator"} for n in names):
        return _http(task, dag)
    if "TriggerDagRunOperator" in names:
        return _trigger(task, dag)
    if "GenericTransfer" in names:
        return Finding(
            "risky",
            "append",
            [Reason("GenericTransfer inserts the rows again")],
            "NaturalKeyMergeOperator over the source query",
        )
    if _arg(task, "sql") is not None and ("BaseSQLOperator" in names or "SQLExecuteQueryOperator" in names):
        return _sql(task, dag)
    missing = unresolved_reason(_operator_class(task))
    if missing:  # a stand-in for a class the scan could not load (a file read from its syntax tree)
        return Finding(
            "unknown",
            "unknown_operator",
            [Reason(f"no rule knows {names[0]}: {missing}")],
            "install its provider where the scan runs, or replay_safe(task, reason=...) if it is harmless "
            "to repeat",
        )
    return _custom(task)


def _python(task: Any, dag: Any) -> Finding:
    own = judge_own_execute(task, dag, None)
    if own is not None:
        return own
    fn = _arg(task, "python_callable")
    if fn is None:
        return Finding("unknown", "unreadable_callable", [Reason("no python_callable found")])
    conn = _arg(task, "conn_id")
    renderer = Renderer(dag, task)
    values: dict[str, Any] = {}
    with contextlib.suppress(
        Exception
    ):  # not rendered, or not known (a stand-in task): the names stay unknown
        op_kwargs = _arg(task, "op_kwargs")
        if isinstance(op_kwargs, dict):
            values.update(renderer.render(op_kwargs))
    findings = analyze_callable(
        fn,
        markers=MARKERS,
        dialect_hint=dialect_of(conn_type_of(conn)) if conn else None,
        values=values,
        render=renderer.render,
        callbacks=callback_functions(dag),
        task_id=str(getattr(task, "task_id", "task")),
    )
    return combine(findings)


def _custom(task: Any) -> Finding:
    """An operator no kind-rule took: a provider operator by its arguments, the team's own by its source."""
    return judge_custom(task, getattr(task, "dag", None), _arg, _mro_names(task))


def _bash(task: Any, dag: Any, names: list[str]) -> Finding:
    if "_BashDecoratedOperator" in names:
        return Finding(
            "unknown",
            "opaque_command",
            [Reason("@task.bash builds its command at run time")],
            "replay_safe(task, reason=...)",
        )
    command = Renderer(dag, task).render(_arg(task, "bash_command", ""))
    return combine(classify_bash(str(command), markers=MARKERS))


def _http(task: Any, dag: Any) -> Finding:
    own = judge_own_execute(task, dag, lambda t: _http(t, dag))
    if own is not None:
        return own
    renderer = Renderer(dag, task)
    method = str(_arg(task, "method", "POST") or "POST").upper()
    endpoint = renderer.render(_arg(task, "endpoint", "")) or ""
    conn = _arg(task, "http_conn_id", "http_default")
    if method in {"GET", "HEAD", "OPTIONS"}:
        return Finding("safe", "http_get", [Reason(f"HTTP {method} {endpoint} reads")])
    data = renderer.render(_arg(task, "data", None))
    read = read_only_post(str(endpoint), str(data or "")) if method == "POST" else None
    if read is not None:
        return Finding("safe", "http_read", [Reason(f"HTTP POST {endpoint}: {read}")])
    raw_headers = _arg(task, "headers", None) or {}
    headers = renderer.render(raw_headers) or {}
    retried = Renderer(dag, task, attempt=2).render(raw_headers) or {}
    keys = {k: str(v) for k, v in dict(headers).items() if "idempotency" in str(k).lower()}
    per_run = all(any(m in v for m in MARKERS) and str(dict(retried).get(k)) == v for k, v in keys.items())
    if keys and per_run:
        return Finding(
            "safe",
            "http_keyed",
            [Reason(f"HTTP {method} {endpoint} carries an idempotency key derived from the run")],
        )
    why = "with an idempotency key made per attempt, not per run" if keys else "without an idempotency key"
    return Finding(
        "risky",
        "http_mutating",
        [
            Reason(
                f"HTTP {method} {endpoint} {why}: a re-run sends it again",
                f"{method} {endpoint} {keys or ''}".strip(),
            )
        ],
        http_operator_fix(
            task, method, _arg(task, "endpoint", "") or "", conn, _arg(task, "data", None), raw_headers
        ),
    )


def _notifier(task: Any, dag: Any, names: list[str]) -> Finding:
    """A mail/chat/SMS operator (a team's subclass too): it sends again on a re-run."""
    sender = next(n for n in names if n.startswith(_NOTIFIERS))

    def sends(t: Any) -> Finding:
        return Finding(
            "risky",
            "notification",
            [
                Reason(
                    f"{names[0]} ({sender}) sends again on a re-run"
                    if names[0] != sender
                    else f"{sender} sends again on a re-run"
                )
            ],
            f'a @task sending it inside effect("{task.task_id}", payload=...) '
            "(airflow_crashsafe.effects.effect)",
        )

    own = judge_own_execute(task, dag, sends)
    return own if own is not None else sends(task)


def _trigger(task: Any, dag: Any) -> Finding:
    """A run-derived ``trigger_run_id`` finds the run; only ``skip_when_already_exists`` makes that a skip."""
    own = judge_own_execute(task, dag, lambda t: _trigger(t, dag))
    if own is not None:
        return own
    raw = _arg(task, "trigger_run_id")
    run_id = Renderer(dag, task).render(raw)
    again = Renderer(dag, task, attempt=2).render(raw)
    keyed = bool(run_id) and any(m in str(run_id) for m in MARKERS) and again == run_id
    if keyed and _arg(task, "reset_dag_run", False):
        return Finding(
            "risky",
            "trigger_dag",
            [
                Reason(
                    "reset_dag_run=True: a re-run clears the triggered run, so the DAG runs again",
                    str(run_id),
                )
            ],
            trigger_fix(task) + " and without reset_dag_run",
        )
    if keyed and _arg(task, "skip_when_already_exists", False):
        return Finding(
            "safe",
            "run_keyed",
            [
                Reason(
                    "the triggered run's id is derived from this run: a re-run finds it and skips",
                    str(run_id),
                )
            ],
        )
    if keyed:
        return Finding(
            "unknown",
            "trigger_rerun_fails",
            [
                Reason(
                    "the triggered run's id is derived from this run, so a re-run triggers nothing more, "
                    "but it fails with DagRunAlreadyExists and stops the DAG run there",
                    str(run_id),
                )
            ],
            trigger_fix(task),
        )
    return Finding(
        "risky",
        "trigger_dag",
        [Reason("a re-run triggers another run of the DAG")],
        trigger_fix(task),
    )


def _markers(parameters: Any) -> list[str]:
    out = list(MARKERS)
    if isinstance(parameters, dict):
        out += [f"{PARAM_MARK}{k}" for k, v in parameters.items() if any(m in str(v) for m in MARKERS)]
    elif isinstance(parameters, list | tuple):
        out += [f"{PARAM_MARK}{i}" for i, v in enumerate(parameters) if any(m in str(v) for m in MARKERS)]
    return out


def _sql(task: Any, dag: Any) -> Finding:
    own = judge_own_execute(task, dag, lambda t: _sql(t, dag))
    if own is not None:
        return own
    renderer = Renderer(dag, task)
    conn = next((c for c in (_arg(task, name) for name in _CONN_ARGS) if c), None)
    dialect = dialect_of(conn_type_of(conn))
    parameters = renderer.render(_arg(task, "parameters"))
    markers = _markers(parameters)
    transactional = not bool(_arg(task, "autocommit", False))
    raw = _arg(task, "sql")
    rendered = renderer.render(raw)
    variants = rendered if isinstance(raw, list | tuple) and _is_mapped_over(task, "sql") else [rendered]
    findings: list[Finding] = []
    for variant in variants:
        text = ";\n".join(variant) if isinstance(variant, list | tuple) else str(variant)
        facts = classify_sql(
            text,
            dialect=dialect,
            transactional=transactional,
            markers=markers,
            fix_for=sql_fixes(conn, _TABLE, dialect),
        )
        table = facts.written[0] if facts.written else "<target table>"
        for f in facts.findings:
            f.fix = f.fix.replace(repr(_TABLE), repr(table)).replace(_TABLE, table)
        findings += facts.findings
    return combine(findings, pure_category="read_only")


def _is_mapped_over(task: Any, name: str) -> bool:
    value = getattr(getattr(task, "expand_input", None), "value", None)
    return isinstance(value, dict) and name in value
