"""A throwaway ``redis-server`` for the Celery fleet: its own port and directory, no persistence.

Debian's ``redis-server`` binary, started as a child of the drill in a session of its own (so the
drill's cleanup SIGKILLs it with everything else). Nothing is written to disk: no RDB snapshot, no
AOF; the directory only holds its log.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from drill.airflow_home import free_port
from drill.components import kill_process_group

__all__ = ["RedisBroker", "find_redis_server"]


def find_redis_server() -> str | None:
    """The ``redis-server`` binary (``CRASHSAFE_REDIS_SERVER`` or PATH), None when not installed."""
    return os.environ.get("CRASHSAFE_REDIS_SERVER") or shutil.which("redis-server")


@dataclass
class RedisBroker:
    """One ``redis-server`` on 127.0.0.1; ``url(db)`` for Celery's broker and result backend."""

    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 30.0) -> RedisBroker:
        """Start and wait until it answers PING; RuntimeError if the binary is missing or exits."""
        binary = find_redis_server()
        if binary is None:
            raise RuntimeError(
                "redis-server not found: install Debian's redis-server (apt-get install redis-server)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root)),
            *("--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no"),
            *("--logfile", str(self.root / "redis.log")),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited at start-up (rc {self.proc.returncode}); see {self.root}"
                )
            if self.ping():
                return self
            time.sleep(0.2)
        raise TimeoutError(f"redis-server not answering after {timeout:.0f} s")

    def ping(self) -> bool:
        """True when the server answers ``PING`` (raw RESP: no client library needed)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        """SIGKILL it; nothing in it is worth keeping."""
        if self.proc is None:
            return
        kill_process_group(self.proc)
        self.proc = None
