"""Worker processes, each job under a deadline: a file that ends or hangs its process costs only itself.

Workers are forked from the scan's process after it has imported Airflow and the rules (Airflow's
dag-processor forks its file processors the same way), and each takes job after job. A worker
reports the phase it is in (importing, judging) before each one, and every report gives it the
time limit again. The parent waits on the workers' pipes and process sentinels with the nearest
deadline: a worker whose process ends without answering (``os._exit``, a signal, a segfault) or
runs past its deadline is killed and replaced, and its job's outcome says which, how and in what
phase. The workers' standard output is their standard error, so nothing a DAG file prints can
reach the report.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "WorkerPool", "default_workers"]

Handler = Callable[[Any, Callable[[str], None]], Any]
#: Extra seconds past a phase's limit before the parent kills the worker, so a limit the worker
#: enforces itself (Airflow's import timeout) is reported with its own message.
GRACE_SECONDS = 2.0


@dataclass
class Outcome:
    """The end of one job: its ``result``, or why the worker never gave one."""

    key: str
    payload: Any
    #: ``done``, ``crashed`` (the process ended) or ``timed_out``.
    status: str
    result: Any = None
    error: str = ""
    phase: str = ""


def default_workers() -> int:
    """One worker per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _serve(conn: multiprocessing.connection.Connection, handler: Handler, init: Callable[[], None]) -> None:
    """A worker's life: answer jobs until told to stop (``None``) or the pipe closes."""
    sys.stdout.flush()
    os.dup2(2, 1)  # a DAG file's print() must not reach the report on stdout
    sys.stdout = sys.stderr
    init()

    def phase(name: str) -> None:
        conn.send(("phase", name))

    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            conn.send(("done", handler(job, phase)))
        except Exception:
            conn.send(("failed", traceback.format_exc(limit=-8)))


class _Worker:
    def __init__(self, ctx: Any, handler: Handler, init: Callable[[], None]) -> None:
        ours, theirs = ctx.Pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns when a process with threads forks; the workers start no thread
            # before they import, and Airflow's dag-processor forks the same way.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.process = ctx.Process(target=_serve, args=(theirs, handler, init), daemon=True)
            self.process.start()
        theirs.close()
        self.conn = ours
        self.job: tuple[str, Any] | None = None
        self.phase = ""
        self.deadline = float("inf")

    def assign(self, key: str, payload: Any, limit: float) -> None:
        self.job = (key, payload)
        self.phase = "importing"
        self.deadline = time.monotonic() + limit
        self.conn.send(payload)

    def stop(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.process.join(1.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()


class WorkerPool:
    """Runs ``handler(payload, phase)`` in forked workers; see the module docstring."""

    def __init__(
        self, handler: Handler, *, size: int, timeout: float, init: Callable[[], None] = lambda: None
    ) -> None:
        self._ctx = multiprocessing.get_context("fork")
        self._handler = handler
        self._init = init
        self._size = max(1, size)
        self._limit = timeout + GRACE_SECONDS
        self._timeout = timeout
        self._queue: deque[tuple[str, Any]] = deque()
        self._workers: list[_Worker] = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, key: str, payload: Any) -> None:
        self._queue.append((key, payload))

    def close(self) -> None:
        for worker in self._workers:
            worker.stop()
        self._workers.clear()

    def _dispatch(self) -> None:
        for worker in self._workers:
            if worker.job is None and self._queue:
                worker.assign(*self._queue.popleft(), self._limit)
        while self._queue and len(self._workers) < self._size:
            worker = _Worker(self._ctx, self._handler, self._init)
            self._workers.append(worker)
            worker.assign(*self._queue.popleft(), self._limit)

    def outcomes(self) -> Iterator[Outcome]:
        """Each job's outcome as it ends, until no job is queued or running (jobs may be added meanwhile)."""
        while True:
            self._dispatch()
            busy = [w for w in self._workers if w.job is not None]
            if not busy:
                return
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            handles: list[Any] = [w.conn for w in busy] + [w.process.sentinel for w in busy]
            multiprocessing.connection.wait(handles, timeout=wait)
            for worker in busy:
                outcome = self._check(worker)
                if outcome is not None:
                    yield outcome

    def _check(self, worker: _Worker) -> Outcome | None:
        assert worker.job is not None
        key, payload = worker.job
        try:
            while worker.conn.poll():
                kind, value = worker.conn.recv()
                if kind == "phase":
                    worker.phase = value
                    worker.deadline = time.monotonic() + self._limit
                    continue
                worker.job = None
                if kind == "done":
                    return Outcome(key, payload, "done", result=value, phase=worker.phase)
                return Outcome(
                    key, payload, "crashed", error=f"the scan failed on it: {value}", phase=worker.phase
                )
        except (EOFError, OSError):
            pass  # the worker's end of the pipe is gone: it died
        if worker.process.is_alive() and time.monotonic() < worker.deadline:
            return None
        timed_out = worker.process.is_alive()
        if timed_out:
            worker.process.kill()
        worker.process.join(5.0)
        self._workers.remove(worker)
        worker.conn.close()
        if timed_out:
            error = (
                f"{worker.phase.capitalize()} the file took longer than {self._timeout:g} s (--timeout); "
                "its process was stopped"
            )
            return Outcome(key, payload, "timed_out", error=error, phase=worker.phase)
        return Outcome(
            key, payload, "crashed", error=_ended(worker.process.exitcode, worker.phase), phase=worker.phase
        )


def _ended(code: int | None, phase: str) -> str:
    """Why a worker's process ended without answering, in words."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        what = "a segmentation fault (SIGSEGV)" if name == "SIGSEGV" else f"{name} (signal {-code})"
        return f"its process was ended by {what} while {phase} the file"
    return (
        f"its process exited with code {code} while {phase} the file: the file, or something it "
        "imports, ends the interpreter (os._exit)"
    )
