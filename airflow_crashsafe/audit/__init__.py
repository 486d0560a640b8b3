"""The audit: who ran each slot, when, and which re-runs were risky (docs/design.md, "Audit").

``replay_safe(task)`` declares a task safe to run twice. The listener module
(:mod:`airflow_crashsafe.audit.listener`) is registered by the plugin; importing this package does
no work and imports no Airflow.

An attempt's path: the listener adapts each hook's task instance to an
:class:`~airflow_crashsafe.audit.events.AttemptEvent` (``events``) and submits it to the process's
:class:`~airflow_crashsafe.audit.writer.Writer`, which stores it through its
:class:`~airflow_crashsafe.audit.writer.AuditSink` (:class:`airflow_crashsafe.store.attempts.AttemptLog`)
or spools it (``spool``). ``classify`` and ``protection`` judge a slot's executions; ``digest``
keeps those verdicts current for the UI, ``reconcile`` fills in ends no hook saw, ``alerts`` raises
risky ones. The SQL of every table involved lives in :mod:`airflow_crashsafe.store`.
"""

from __future__ import annotations

from airflow_crashsafe.audit.protection import replay_safe

__all__ = ["replay_safe"]
