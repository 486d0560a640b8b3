"""Names each scheduler's, triggerer's and dag-processor's own metadata sessions after it.

Register the module in the plugin. Airflow calls ``on_starting(component=job)`` from
``Job.__init__`` in every scheduler, triggerer and dag-processor process (the api-server is no
job and never calls it; the task runner calls it with a marker, ignored here). At that moment the
job has neither its type (its runner sets it) nor its id (its row is inserted when it starts to
run), so the hook keeps the job and attaches two SQLAlchemy events to Airflow's metadata engine,
PostgreSQL only:

- ``do_connect``: a connection opened by this process starts with the identity it has now;
- pool ``checkout``: when the identity this process has now differs from what the connection
  carries (kept in the connection record's ``info``), the connection is renamed with
  ``set_config('application_name', …)`` and a commit — nothing is in progress at checkout, and a
  session setting made in a transaction that rolls back would be undone.

The identity (:func:`~airflow_crashsafe.component_identity.name.application_name`) exists once
the job has a type and an id, so the scheduler's loop runs on named connections from its first
critical section. Only connections of the process that created the job are named: a process it
forks inherits the engine but not the name (Airflow's own checkout handler also refuses a child
its parent's connections), so a child is never taken for the scheduler. Nothing here raises into
Airflow, and nothing runs at import.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pluggy

from airflow_crashsafe.component_identity.name import COMPONENT_OF_JOB_TYPE, application_name

__all__ = ["INFO_KEY", "current_identity", "install", "on_starting"]

log = logging.getLogger(__name__)

#: The marker of Airflow's listener hooks (``airflow.listeners.hookimpl``).
hookimpl = pluggy.HookimplMarker("airflow")

#: Key in a pooled connection record's ``info``: the application name that connection carries.
INFO_KEY = "crashsafe_application_name"
_RENAME = "SELECT set_config('application_name', %s, false)"

_job: tuple[int, Any] | None = None  # (pid of the process that created it, the Job)
_warned = threading.Event()


def _is_job(component: Any) -> bool:
    """Airflow's ``Job`` (an ORM row of ``job``), told apart without importing Airflow's models."""
    kind = type(component)
    return kind.__module__.startswith("airflow.") and getattr(kind, "__tablename__", None) == "job"


def current_identity() -> str | None:
    """The application name this process's metadata sessions should carry now, None when none yet.

    Reads the job's loaded attributes directly (never through the ORM, which could query).
    """
    held = _job
    if held is None or held[0] != os.getpid():
        return None
    pid, job = held
    state = vars(job)
    component = COMPONENT_OF_JOB_TYPE.get(str(state.get("job_type")))
    job_id, host = state.get("id"), state.get("hostname")
    if component is None or not isinstance(job_id, int) or not host:
        return None
    return application_name(component, job_id, pid, str(host))


def _warn(what: str, exc: BaseException) -> None:
    level = logging.DEBUG if _warned.is_set() else logging.WARNING
    _warned.set()
    log.log(level, "crashsafe could not %s (the watchdog cannot prove a wedge): %s", what, exc)


def _on_connect(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
    try:
        name = current_identity()
        if name is not None:
            cparams["application_name"] = name
            record.info[INFO_KEY] = name
    except Exception as exc:
        _warn("name a new metadata connection", exc)


def _on_checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
    try:
        name = current_identity()
        if name is None or record.info.get(INFO_KEY) == name:
            return
        if record.info.get("pid", os.getpid()) != os.getpid():
            return  # another process's connection: Airflow's own handler refuses it
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(_RENAME, (name,))
        finally:
            cursor.close()
        dbapi_connection.commit()
        record.info[INFO_KEY] = name
    except Exception as exc:
        try:
            dbapi_connection.rollback()
        except Exception:  # a broken connection: Airflow's next use reports it
            log.debug("rollback after a failed rename failed", exc_info=True)
        _warn("name a metadata connection", exc)


def install(job: Any, engine: Any) -> bool:
    """Name ``engine``'s connections in this process after ``job`` from now on; False if not PostgreSQL."""
    global _job
    if engine is None or engine.dialect.name != "postgresql":
        return False
    from sqlalchemy import event

    _job = (os.getpid(), job)
    if not event.contains(engine, "checkout", _on_checkout):
        event.listen(engine, "do_connect", _on_connect)
        event.listen(engine, "checkout", _on_checkout)
    return True


@hookimpl
def on_starting(component: Any) -> None:
    """A scheduler, triggerer or dag-processor is starting: name its metadata sessions after it."""
    try:
        if not _is_job(component):
            return
        from airflow import settings

        install(component, getattr(settings, "engine", None))
    except Exception as exc:
        _warn("attach the session identity to Airflow's metadata engine", exc)
