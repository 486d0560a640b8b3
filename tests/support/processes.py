"""Processes for the multi-process race tests, forked from a server that imported Airflow once.

A ``spawn`` child imports Airflow and crashsafe afresh: 2-3 s of CPU each, eight per race, which
made the race tests the slowest integration tests. A ``forkserver`` child is forked from one
server process that preloaded those modules (:data:`PRELOAD`): still a separate process that opens
its own connections after the fork, so the race is the same, but it starts in milliseconds.
Children run in the environment the test had when it started them, as spawned children do (the
server itself keeps the environment of the first test that used it).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["PRELOAD", "race_context", "start_children"]

#: Imported once by the fork server: what every child would import anyway (a module that cannot be
#: imported is skipped by the server, and the child imports it itself as a spawned one would).
PRELOAD = [
    "airflow.sdk",
    "airflow.sdk.configuration",
    "airflow_crashsafe.fencing",
    "airflow_crashsafe.store.store",
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


def _in_environment(env: dict[str, str], target: Callable[..., None], args: tuple[Any, ...]) -> None:
    os.environ.clear()
    os.environ.update(env)
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
