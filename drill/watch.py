"""The watchdog beside the drill's Airflow, and the local webhook its alerts are delivered to.

The watchdog runs as its own process (``python -m airflow_crashsafe.watchdog.cli``), exactly as an
operator would run it next to Airflow, outside it (docs/design.md, "Watchdog and alerting"), with
one generic webhook sink pointed at :class:`WebhookReceiver`, an HTTP server in the drill's process
that stamps each delivery with its receipt time. SIGKILL-to-alert is then measured end to end: the
poll, the rule, the sink's HTTP POST. The watchdog's end-to-end tests and its latency benchmark
use the same two pieces.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from drill.airflow_home import repo_root
from drill.components import Component

__all__ = ["Delivery", "WatchdogProcess", "WebhookReceiver", "watchdog_accepts", "watchdog_env"]


@dataclass
class Delivery:
    """One alert as the webhook received it."""

    at: float
    alert: dict[str, Any]

    @property
    def key(self) -> str:
        """The incident's condition key (``scheduler_dead``, ``api_unreachable``, ...)."""
        # ``airflow-crashsafe:<instance>:<key>:<incident id>``; a key may itself hold a colon.
        parts = str(self.alert.get("dedup_key") or "").split(":")
        return ":".join(parts[2:-1])

    def summary(self) -> str:
        return f"{self.alert.get('event')} {self.alert.get('severity')}: {self.alert.get('summary')}"


class WebhookReceiver:
    """A local HTTP endpoint recording every JSON POST with the time it arrived."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    alert = json.loads(body or b"{}")
                except ValueError:
                    alert = {"unparsed": body.decode(errors="replace")}
                with receiver._arrived:
                    receiver.deliveries.append(Delivery(at, alert))
                    receiver._arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/alerts"

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for(self, event: str, key_prefix: str, *, after: float = 0.0, timeout: float) -> Delivery | None:
        """The first delivery of ``event`` for a condition starting with ``key_prefix`` after ``after``."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                for d in self.deliveries:
                    if d.at >= after and d.alert.get("event") == event and d.key.startswith(key_prefix):
                        return d
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._arrived.wait(left)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def watchdog_env() -> dict[str, str]:
    """The watchdog's environment: the checkout's package first, none of Airflow's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo_root()), env.get("PYTHONPATH")]))
    return env


def watchdog_accepts(flag: str) -> bool:
    """Whether this checkout's watchdog has option ``flag`` (read from its ``--help``)."""
    done = subprocess.run(
        [sys.executable, "-m", "airflow_crashsafe.watchdog.cli", "--help"],
        env=watchdog_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return flag in done.stdout.split()


@dataclass
class WatchdogProcess:
    """``airflow-crashsafe watch`` as a subprocess, delivering to ``webhook_url``."""

    api_url: str
    webhook_url: str
    workdir: Path
    name: str = "watchdog"
    options: list[str] = field(default_factory=list)
    token: str | None = None
    process: Component | None = None
    #: More of the config file beside its webhook sink: ``watch`` options, ``deadlines``.
    config_extra: dict[str, Any] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> WatchdogProcess:
        """Start in a session of its own (cleanup kills the group); its log goes next to its state."""
        state = self.workdir / f"{self.name}-state"
        state.mkdir(parents=True, exist_ok=True)
        config = state / "watch.json"
        config.write_text(
            json.dumps(
                {
                    "sinks": [{"type": "webhook", "name": "drill", "url": self.webhook_url}],
                    **self.config_extra,
                }
            )
        )
        argv = [sys.executable, "-m", "airflow_crashsafe.watchdog.cli", "--config", str(config)]
        argv += ["--api-url", self.api_url, "--state-dir", str(state), *self.options]
        env = watchdog_env()
        if self.token:
            env["CRASHSAFE_DRILL_API_TOKEN"] = self.token
            argv += ["--api-token-env", "CRASHSAFE_DRILL_API_TOKEN"]
        self.process = Component(self.name, argv, env, self.log_path)
        self.process.start()
        return self

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.process.proc if self.process else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self) -> None:
        """SIGTERM (the watchdog stops cleanly between polls), SIGKILL the group if it lingers."""
        if self.process is None or self.process.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.proc.send_signal(signal.SIGTERM)
        try:
            self.process.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill_group()

    def tail(self, lines: int = 20) -> str:
        return self.process.tail(lines) if self.process else ""
