"""Another host for a test: Python code run in Linux namespaces of its own (hostname and pids).

``unshare --uts --pid --mount-proc --fork --kill-child`` gives the code its own hostname (set inside)
and its own pid space, so what it records in the store carries another host's name and a pid that
means nothing here — as on a real second machine. Killing the host SIGKILLs its namespace's init:
every process in it dies at once. Needs root and ``unshare`` (util-linux).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

__all__ = ["OtherHost", "host_env", "other_host", "require_namespaces", "shared_store"]

REPO = Path(__file__).resolve().parents[2]


def require_namespaces() -> None:
    """Skip (fail on CI) where namespaces cannot be made: not root, or no ``unshare``."""
    why = None
    if shutil.which("unshare") is None:
        why = "unshare (util-linux) is not installed"
    elif os.geteuid() != 0:
        why = "simulating another host needs root (unshare --uts --pid)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the cross-host tests: {why}", pytrace=False)
        pytest.skip(why)


class OtherHost:
    """A running program on another host; lines it prints are read with :meth:`expect`."""

    def __init__(self, hostname: str, code: str, env: dict[str, str]) -> None:
        self.hostname = hostname
        program = shlex.join([sys.executable, "-u", "-c", textwrap.dedent(code)])
        inner = f"hostname {shlex.quote(hostname)} && exec {program}"
        self.proc = subprocess.Popen(
            ["unshare", "--uts", "--pid", "--mount-proc", "--fork", "--kill-child", "sh", "-c", inner],
            env={**os.environ, "PYTHONPATH": str(REPO), **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def expect(self, word: str) -> str:
        """Read lines until one starts with ``word``; AssertionError with the output if it exits first."""
        assert self.proc.stdout is not None
        seen = []
        for line in self.proc.stdout:
            seen.append(line)
            if line.startswith(word):
                return line.strip()
        raise AssertionError(f"{self.hostname} exited before {word!r}:\n{''.join(seen)}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def lose(self) -> None:
        """SIGKILL the namespace's init: the kernel kills every process of the host at once."""
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            for child in psutil.Process(self.proc.pid).children():
                os.kill(child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def close(self) -> None:
        self.lose()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@contextlib.contextmanager
def other_host(hostname: str, code: str, env: dict[str, str]) -> Iterator[OtherHost]:
    """Run ``code`` on host ``hostname`` for the duration of the block; always killed after."""
    host = OtherHost(hostname, code, env)
    try:
        yield host
    finally:
        host.close()


def shared_store(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The PostgreSQL crashsafe store this process and the other hosts share (a fleet has one)."""
    from airflow_crashsafe.store import open_store, reset_store_cache

    require_namespaces()
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    reset_store_cache()
    return open_store()


def host_env(postgres_url: str) -> dict[str, str]:
    """What a simulated host needs: the shared store, and its own hostname as Airflow records it."""
    return {
        "AIRFLOW_CONN_CRASHSAFE_DEFAULT": postgres_url,
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "socket.gethostname",
    }
