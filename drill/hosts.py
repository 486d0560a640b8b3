"""Simulated hosts: a Celery worker in Linux namespaces of its own, with its own hostname and pids.

Each worker runs under ``unshare --uts --pid --mount-proc --fork --kill-child``: a UTS namespace
(its own hostname, set inside before the worker starts), a PID namespace (its processes are pids
1, 2, ... there, so a pid recorded on one host means nothing on another, as on real machines) and
its own ``/proc``. Network and filesystem stay shared: the worker reaches PostgreSQL, Redis and
the vendors on 127.0.0.1, and writes task logs where the drill reads them. So no hostname or pid
check can pass by accident, while everything else is as on one machine.

Losing the host is SIGKILLing the namespace's init: the kernel then SIGKILLs every process in the
namespace at once, as a power loss would — no supervisor reports anything, no hook fires.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from drill.components import Component

__all__ = ["SimulatedHost", "unshare_available", "worker_argv"]


def unshare_available() -> str | None:
    """Why simulated hosts cannot run here, or None when they can (root and ``unshare`` needed)."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if os.geteuid() != 0:
        return "simulated hosts need root (unshare --uts --pid creates namespaces)"
    return None


def worker_argv(hostname: str, queues: list[str], concurrency: int) -> list[str]:
    """``unshare ... sh -c 'hostname H && exec airflow celery worker ...'``."""
    airflow = str(Path(sys.executable).parent / "airflow")
    worker = [
        airflow,
        *("celery", "worker", "--queues", ",".join(queues), "--concurrency", str(concurrency)),
        *("--skip-serve-logs", "--without-mingle", "--without-gossip"),
    ]
    inner = f"hostname {shlex.quote(hostname)} && exec {shlex.join(worker)}"
    return ["unshare", "--uts", "--pid", "--mount-proc", "--fork", "--kill-child", "sh", "-c", inner]


@dataclass
class SimulatedHost:
    """One host of the fleet: a name, the queues its worker consumes, the worker component."""

    hostname: str
    queues: list[str]
    concurrency: int
    component: Component
    lost_at: float | None = None

    @property
    def celery_name(self) -> str:
        """The worker's Celery node name (``celery@<hostname>``), for remote control."""
        return f"celery@{self.hostname}"

    def start(self) -> None:
        self.component.start()

    def alive(self) -> bool:
        return self.component.alive()

    def namespace_init(self) -> int | None:
        """Outer pid of the namespace's pid 1 (the forked child of ``unshare``)."""
        if self.component.pid is None:
            return None
        try:
            children = psutil.Process(self.component.pid).children()
        except psutil.Error:
            return None
        return children[0].pid if children else None

    def processes(self) -> int:
        """How many processes run on this host now (its namespace init and all below)."""
        init = self.namespace_init()
        if init is None:
            return 0
        try:
            return 1 + len(psutil.Process(init).children(recursive=True))
        except psutil.Error:
            return 0

    def lose(self) -> int:
        """SIGKILL the namespace's init (the kernel kills the rest); returns how many processes died."""
        count = self.processes()
        init = self.namespace_init()
        if init is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
        self.lost_at = time.time()
        if self.component.proc is not None:
            with contextlib.suppress(Exception):
                self.component.proc.wait(timeout=15)
        return count
