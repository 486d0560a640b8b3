"""Start, crash and clean up real Airflow components.

Each component runs in its own session (process group) so cleanup can SIGKILL the whole group:
LocalExecutor workers ignore SIGTERM, and a graceful stop can hang on an idle worker. Task
processes put themselves into groups of their own (the supervisor calls ``setpgid``), so cleanup
also kills every process whose environment carries this drill's AIRFLOW_HOME.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psutil

__all__ = [
    "COMMANDS",
    "Component",
    "airflow_component",
    "drill_processes",
    "health",
    "kill_drill_processes",
    "wait_until",
]

T = TypeVar("T")

#: ``airflow`` sub-commands the drill and the stack start, by component name.
COMMANDS = {
    "api-server": ["api-server"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    # Deferred tasks wait here: a crashsafe re-run waiting to adopt its predecessor's unit.
    "triggerer": ["triggerer", "--skip-serve-logs"],
    "db-migrate": ["db", "migrate"],
}


@dataclass
class Component:
    """One Airflow component process (``airflow scheduler`` and so on) and its log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Launch in a new session; output is appended to ``log_path`` (kept for post-mortems)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def crash(self) -> list[int]:
        """SIGKILL the component's main process only, as an OOM kill would.

        Its LocalExecutor workers (and the tasks they supervise) are left running on purpose: that
        is the crash being drilled. Returns the pids of the surviving children.
        """
        if not self.alive() or self.proc is None:
            return []
        try:
            survivors = [p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            survivors = []
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        return survivors

    def kill_group(self) -> None:
        """SIGKILL the component's whole process group (cleanup)."""
        if self.proc is not None:
            kill_process_group(self.proc)

    def wait_success(self, timeout: float) -> None:
        """Wait for a one-shot command (``db migrate``) to exit 0; RuntimeError with its log's tail if not."""
        if self.proc is None or self.proc.wait(timeout=timeout) != 0:
            raise RuntimeError(f"airflow {' '.join(self.argv[1:])} failed:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def airflow_component(name: str, env: dict[str, str], logs: Path, starts: dict[str, int]) -> Component:
    """``airflow <COMMANDS[name]>``, logging to ``logs/<name>.log`` (``<name>-<n>.log``: n-th start)."""
    starts[name] = starts.get(name, 0) + 1
    suffix = "" if starts[name] == 1 else f"-{starts[name]}"
    airflow = str(Path(sys.executable).parent / "airflow")
    return Component(name, [airflow, *COMMANDS[name]], env, logs / f"{name}{suffix}.log")


def drill_processes(sessions: set[int], airflow_home: Path | None = None) -> list[psutil.Process]:
    """Every live process started for this drill.

    Found by session id (each component is a session leader; workers and task processes stay in
    its session even after the component dies), and by the AIRFLOW_HOME in the environment for
    anything that left the session. ``setproctitle`` clobbers most workers' environment block, so
    the session is the reliable mark.
    """
    found = []
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            if os.getsid(proc.pid) in sessions or (
                airflow_home is not None and proc.environ().get("AIRFLOW_HOME") == str(airflow_home)
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def kill_drill_processes(sessions: set[int], airflow_home: Path | None = None, rounds: int = 5) -> list[int]:
    """SIGKILL whatever is left of the drill (workers reparented to init, task processes)."""
    killed: list[int] = []
    for _ in range(rounds):
        procs = drill_processes(sessions, airflow_home)
        if not procs:
            break
        for proc in procs:
            try:
                proc.kill()
                killed.append(proc.pid)
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=5)
    return killed


def health(api_url: str, timeout: float = 3.0) -> dict[str, object] | None:
    """``/api/v2/monitor/health`` (no auth needed), or None while the api-server is not serving."""
    try:
        with urllib.request.urlopen(f"{api_url}/api/v2/monitor/health", timeout=timeout) as resp:
            return dict(json.loads(resp.read()))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def kill_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s whole process group (started with ``start_new_session``) and reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def wait_until(
    what: str,
    check: Callable[[], T],
    timeout: float,
    interval: float = 1.0,
    tick: Callable[[], None] | None = None,
) -> T:
    """Poll ``check()`` until it returns something truthy; TimeoutError names ``what`` otherwise.

    A check that fails with ``OSError`` (an api-server too busy to answer in time, a connection
    reset) is asked again at the next poll: on two loaded cores one slow answer is no verdict.
    ``tick`` (a :class:`~drill.waiting.Ticker`) is called after every poll that was not enough.
    """
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    while True:
        try:
            result = check()
        except OSError as exc:
            result, last = None, exc
        if result:
            return result
        if time.monotonic() > deadline:
            because = f" (last error: {type(last).__name__}: {last})" if last is not None else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{because}")
        if tick is not None:
            tick()
        time.sleep(interval)
