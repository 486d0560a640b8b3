"""Listener hooks recording each attempt's start and end (register the module in the plugin).

Module-level ``@hookimpl`` functions, as in OpenLineage's listener: each adapts Airflow's object to
a plain :class:`~airflow_crashsafe.audit.events.AttemptEvent` (pure functions in ``events``) and
hands it to the process's :class:`~airflow_crashsafe.audit.writer.Writer`, which stores it under
a hard time limit or spools it. No hook ever raises, and nothing runs at import time.

Where each hook fires (Airflow 3.3): ``on_task_instance_running`` and the terminal hooks in the
task process on a worker (Task SDK objects); ``on_task_instance_failed`` also in the scheduler
(executor-reported death, heartbeat timeout) and success/failed/skipped in the api-server (a user
marking state), with ORM objects. A reset attempt fires nothing: ``audit reconcile`` fills it in.
A task that defers (or a sensor rescheduled) stops its process with no terminal hook and goes on
in another process under the same try; ``before_stopping`` records that stop, so the two
processes are read as one execution, not as one try run twice. It is the last hook before the
task process's ``os._exit()``: it lets the writer finish (see :meth:`Writer.close`).

A stale attempt learns it was replaced at its next heartbeat; its supervisor then sends SIGTERM
(whose handler, installed by the task runner before ``on_task_instance_running``, only calls
``on_kill()``) and SIGKILL 5 s later. No hook sees either, so the running hook chains a SIGTERM
handler in front of Airflow's: it notes the moment for the writer and calls the original.

Options (``[crashsafe]``, read once per process): ``audit_timeout_seconds`` (0.5),
``audit_beacon_seconds`` (5), ``audit_enabled`` (true).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

import pluggy

from airflow_crashsafe import config

if TYPE_CHECKING:
    from airflow_crashsafe.audit.writer import Writer

__all__ = [
    "before_stopping",
    "get_writer",
    "on_task_instance_failed",
    "on_task_instance_running",
    "on_task_instance_skipped",
    "on_task_instance_success",
    "set_writer",
]

log = logging.getLogger(__name__)

#: The marker of ``airflow.listeners.hookimpl`` / ``airflow.sdk._shared.listeners.hookimpl``.
hookimpl = pluggy.HookimplMarker("airflow")

_writer: Writer | None = None
_writer_lock = threading.Lock()
_sigterm_chained_in: int | None = None  # the pid whose SIGTERM handler is chained
_running_ti: tuple[int, Any] | None = None  # (pid, task instance) this task process runs


def _enabled() -> bool:
    try:
        return config.audit_enabled()
    except Exception:  # a broken option must not break tasks; the audit stays on
        return True


def _build_writer() -> Writer:
    from airflow_crashsafe.audit.spool import Spool, default_spool_dir
    from airflow_crashsafe.audit.writer import Writer
    from airflow_crashsafe.store import open_store
    from airflow_crashsafe.store.attempts import AttemptLog

    return Writer(
        AttemptLog(open_store()),
        Spool(default_spool_dir()),
        timeout=config.audit_timeout_seconds(),
        beacon_interval=config.audit_beacon_seconds(),
    )


def get_writer() -> Writer:
    """This process's writer, built on first use (and again after a fork)."""
    global _writer
    with _writer_lock:
        if _writer is None or _writer.pid != os.getpid():
            _writer = _build_writer()
        return _writer


def set_writer(writer: Writer | None) -> None:
    """Use ``writer`` in this process (tests and benchmarks inject one bound to their store)."""
    global _writer
    with _writer_lock:
        _writer = writer


def _record(build: Any, *args: Any) -> None:
    if not _enabled():
        return
    try:
        event = build(*args)
    except Exception:
        log.warning("crashsafe audit: could not read the task instance", exc_info=True)
        return
    try:
        get_writer().submit(event)
    except Exception:
        log.warning("crashsafe audit: could not record %s", event.describe(), exc_info=True)


def _on_sigterm(previous: Any) -> Any:
    """A SIGTERM handler that tells this process's writer, then does what ``previous`` did."""

    def handler(signum: int, frame: Any) -> None:
        writer = _writer
        if writer is not None and getattr(writer, "pid", None) == os.getpid():
            with contextlib.suppress(Exception):  # never keep Airflow's own handler from running
                writer.note_terminated()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    return handler


def _chain_sigterm() -> None:
    """Once per task process, from its main thread (the only one that may set handlers)."""
    global _sigterm_chained_in
    if _sigterm_chained_in == os.getpid() or threading.current_thread() is not threading.main_thread():
        return
    try:
        signal.signal(signal.SIGTERM, _on_sigterm(signal.getsignal(signal.SIGTERM)))
        _sigterm_chained_in = os.getpid()
    except Exception:
        log.debug("crashsafe audit: could not chain the SIGTERM handler", exc_info=True)


def _terminal(task_instance: Any, state: str) -> None:
    from airflow_crashsafe.audit import events

    if events.is_worker_ti(task_instance):
        raw = getattr(task_instance, "state", None)
        raw = str(getattr(raw, "value", raw)) if raw is not None else None
        reported = raw if state == "failed" and raw in ("up_for_retry", "failed") else state
        _record(events.ended, task_instance, reported)
    else:
        _record(events.from_server_ti, task_instance, None if state == "failed" else state)


@hookimpl
def on_task_instance_running(previous_state: Any, task_instance: Any) -> None:
    """An attempt started executing (fires once per attempt, in the task process)."""
    from airflow_crashsafe.audit import events

    global _running_ti
    if events.is_worker_ti(task_instance):
        _running_ti = (os.getpid(), task_instance)
        _record(events.started, task_instance)
        if _enabled():
            _chain_sigterm()


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    """An attempt succeeded (task process), or a user marked it success (api-server)."""
    _terminal(task_instance, "success")


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    """An attempt failed: reported by its process, or decided by the scheduler or a user."""
    _terminal(task_instance, "failed")


@hookimpl
def on_task_instance_skipped(previous_state: Any, task_instance: Any) -> None:
    """An attempt ended skipped."""
    _terminal(task_instance, "skipped")


@hookimpl
def before_stopping(component: Any) -> None:
    """A task process stops: record a deferral or reschedule, then let the writer finish.

    The task runner calls this after ``finalize()``, whatever the state, with ``ti.state`` set, and
    then ends the process with ``os._exit()``, which kills the writer's thread wherever it is. The
    suspension is this process's last word and nothing waits on it any more (the supervisor has
    already sent the deferral to the api-server, and the resumed process may be starting), so it
    gets the writer's ``stop_timeout`` rather than the per-event limit, and then
    :meth:`~airflow_crashsafe.audit.writer.Writer.close` waits, within the same limit, for the write
    in flight and a drain under way. Before this, a suspension whose write outlasted 0.5 s was left
    to the spool, and the write itself to a thread about to be killed.
    """
    from airflow_crashsafe.audit import events

    running = _running_ti
    if running is None or running[0] != os.getpid() or not _enabled():
        return
    raw = getattr(running[1], "state", None)
    state = str(getattr(raw, "value", raw)) if raw is not None else None
    try:
        writer = get_writer()
    except Exception:
        log.warning("crashsafe audit: no writer at the task's stop", exc_info=True)
        return
    if state in events.SUSPENDED:
        try:
            event = events.ended(running[1], state)
        except Exception:
            log.warning("crashsafe audit: could not read the task instance", exc_info=True)
        else:
            try:
                writer.submit(event, timeout=writer.stop_timeout)
            except Exception:
                log.warning("crashsafe audit: could not record %s", event.describe(), exc_info=True)
    try:
        writer.close()
    except Exception:
        log.debug("crashsafe audit: closing the writer failed", exc_info=True)
