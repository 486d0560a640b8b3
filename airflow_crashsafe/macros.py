"""Template macros the plugin registers: ``{{ macros.crashsafe.<name>(...) }}``.

Airflow renders templates before ``execute()`` and before the task's current context is set, so
each macro takes Jinja's own context (``@pass_context``), which holds ``ti`` and ``dag_run``.
"""

from __future__ import annotations

from typing import Any

from jinja2 import pass_context

from airflow_crashsafe.effects.keys import idempotency_key as _idempotency_key

__all__ = ["MACROS", "idempotency_key"]


@pass_context
def idempotency_key(jinja_context: Any, target: str, version: int = 1) -> str:
    """``{{ macros.crashsafe.idempotency_key('payouts') }}``: the task's key for ``target``."""
    context = {"ti": jinja_context["ti"], "dag_run": jinja_context["dag_run"]}
    return _idempotency_key(target, context=context, version=version)


#: What ``CrashsafePlugin.macros`` lists; Airflow names each by its ``__name__``.
MACROS = [idempotency_key]
