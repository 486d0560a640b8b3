"""Optional Prometheus endpoint: the watchdog's own view, in the text exposition format.

A few gauges and counters, served by the stdlib's ``http.server`` on a daemon thread, so the
watchdog needs no ``prometheus_client``. Metrics are rebuilt after each poll and served as-is.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from airflow_crashsafe.alerting.incidents import Incident
from airflow_crashsafe.watchdog.health import COMPONENTS, Observation
from airflow_crashsafe.watchdog.rules import Rules, is_alive

__all__ = ["MetricsServer", "render"]

_HELP = {
    "crashsafe_watchdog_last_poll_timestamp_seconds": ("gauge", "Unix time of the last poll."),
    "crashsafe_watchdog_source_up": ("gauge", "1 if the api-server / metadata DB could be read."),
    "crashsafe_watchdog_component_alive": ("gauge", "1 if at least one job of the component is alive."),
    "crashsafe_watchdog_heartbeat_age_seconds": ("gauge", "Age of the component's newest heartbeat."),
    "crashsafe_watchdog_incidents": ("gauge", "Incidents by state (pending/open) and severity."),
    "crashsafe_watchdog_outbox_pending": ("gauge", "Alert deliveries waiting for a retry."),
    "crashsafe_watchdog_sink_failures_total": ("counter", "Failed deliveries (after retries) per sink."),
}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(
    observation: Observation,
    incidents: Mapping[str, Incident],
    rules: Rules,
    *,
    outbox_pending: int,
    sink_failures: Mapping[str, int],
) -> str:
    """The exposition text for one poll."""
    samples: dict[str, list[str]] = {name: [] for name in _HELP}
    samples["crashsafe_watchdog_last_poll_timestamp_seconds"].append(f" {observation.at.timestamp():.3f}")
    samples["crashsafe_watchdog_source_up"].append(f'{{source="{observation.source}"}} {int(observation.ok)}')
    if observation.ok:
        for component in COMPONENTS:
            jobs = observation.jobs_of(component)
            alive = any(is_alive(j, observation.at, rules.threshold) for j in jobs)
            samples["crashsafe_watchdog_component_alive"].append(f'{{component="{component}"}} {int(alive)}')
            beats = [j.latest_heartbeat for j in jobs if j.latest_heartbeat]
            if beats:
                age = (observation.at - max(beats)).total_seconds()
                samples["crashsafe_watchdog_heartbeat_age_seconds"].append(
                    f'{{component="{component}"}} {age:.3f}'
                )
    counts: dict[tuple[str, str], int] = {}
    for incident in incidents.values():
        state = "open" if incident.opened_at else "pending"
        counts[(state, incident.severity)] = counts.get((state, incident.severity), 0) + 1
    for state in ("pending", "open"):
        for severity in ("warning", "critical"):
            samples["crashsafe_watchdog_incidents"].append(
                f'{{state="{state}",severity="{severity}"}} {counts.get((state, severity), 0)}'
            )
    samples["crashsafe_watchdog_outbox_pending"].append(f" {outbox_pending}")
    for sink, failures in sorted(sink_failures.items()):
        samples["crashsafe_watchdog_sink_failures_total"].append(f'{{sink="{_label(sink)}"}} {failures}')
    lines: list[str] = []
    for name, (kind, text) in _HELP.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        lines += [f"{name}{sample}" for sample in samples[name]]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves the latest :func:`render` output on ``GET /metrics`` from a daemon thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 9468) -> None:
        self._text = "# no poll yet\n"
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = outer.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes are not news
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="crashsafe-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def text(self) -> str:
        with self._lock:
            return self._text

    def update(self, text: str) -> None:
        with self._lock:
            self._text = text

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
