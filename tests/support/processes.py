"""Task processes for the race and crash tests, forked from a server that imported Airflow once.

A ``spawn`` child or a ``python -m`` subprocess imports Airflow and crashsafe afresh: 2-3 s of CPU
each, eight per race and two or three per crash test, which made these the slowest integration
tests. A ``forkserver`` child is forked from one server process that preloaded those modules
(:data:`PRELOAD`): still a separate process that opens its own connections after the fork and can
be SIGKILLed like any other, but it starts in milliseconds. Children run in the environment the
test had when it started them, as a subprocess does (the server itself keeps the environment of
the first test that used it).
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["PRELOAD", "ModuleRun", "race_context", "run_module", "start_children"]

#: Imported once by the fork server: what every child would import anyway (a module that cannot be
#: imported is skipped by the server, and the child imports it itself as a spawned one would).
PRELOAD = [
    "airflow.sdk",
    "airflow.sdk.configuration",
    "airflow_crashsafe.fencing",
    "airflow_crashsafe.store.store",
    "airflow_crashsafe.effects.calls",
    "airflow_crashsafe.operators.http",
    "airflow_crashsafe.testing",
    "airflow_crashsafe.policy",
    "airflow.dag_processing.dagbag",
    "psycopg",
    "MySQLdb",
    "tests.support.fencing",
    "tests.support.store_race",
]


def race_context() -> ForkServerContext:
    """The ``forkserver`` context, its server preloading :data:`PRELOAD` (started on first use)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _take_environment(env: dict[str, str]) -> None:
    """The test's environment, and no ``[crashsafe]`` option cached before it (as in a new process)."""
    from airflow_crashsafe import config

    os.environ.clear()
    os.environ.update(env)
    config.reset_cache()


def _in_environment(env: dict[str, str], target: Callable[..., None], args: tuple[Any, ...]) -> None:
    _take_environment(env)
    target(*args)


def start_children(
    ctx: ForkServerContext, target: Callable[..., None], args_each: Iterable[tuple[Any, ...]]
) -> list[BaseProcess]:
    """Start one child per argument tuple, each running ``target(*args)`` in this environment."""
    env = dict(os.environ)
    procs = [ctx.Process(target=_in_environment, args=(env, target, args)) for args in args_each]
    for proc in procs:
        proc.start()
    return procs


def _module_main(env: dict[str, str], module: str, argv: list[str], out: str, err: str, go: Any) -> None:
    """``python -m module argv...`` in this child: stdout and stderr to files, exit code kept."""
    _take_environment(env)
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
    sys.argv = [module, *argv]
    go.wait()
    runpy.run_module(module, run_name="__main__", alter_sys=True)  # its sys.exit() is the exit code


class ModuleRun:
    """What the crash tests used of :class:`subprocess.Popen`: ``pid``, ``communicate()``,
    ``returncode`` (negative: killed by that signal). Started held when asked: the module runs
    only after :meth:`release`, so the test can hand its pid to a vendor that kills it first."""

    def __init__(self, module: str, argv: list[str], *, held: bool) -> None:
        ctx = race_context()
        self._dir = tempfile.TemporaryDirectory(prefix="crashsafe-task-")
        self._out, self._err = (os.path.join(self._dir.name, name) for name in ("out", "err"))
        self._go = ctx.Event()
        env = dict(os.environ)
        self._proc = ctx.Process(
            target=_module_main, args=(env, module, argv, self._out, self._err, self._go)
        )
        self._proc.start()
        if not held:
            self.release()

    @property
    def pid(self) -> int:
        assert self._proc.pid is not None
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def release(self) -> None:
        self._go.set()

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Wait for the exit (killing the child past ``timeout``, as TimeoutExpired); its output."""
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            self._proc.kill()
            self._proc.join()
            raise subprocess.TimeoutExpired(self._proc.name or "task", timeout)
        try:
            with open(self._out, errors="replace") as out, open(self._err, errors="replace") as err:
                return out.read(), err.read()
        finally:
            self._dir.cleanup()


def run_module(module: str, *argv: str, held: bool = False) -> ModuleRun:
    """Run ``python -m module argv...`` as a forked child of the preloaded server (see above)."""
    return ModuleRun(module, list(argv), held=held)
