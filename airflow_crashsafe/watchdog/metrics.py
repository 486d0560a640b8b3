"""Optional Prometheus endpoint: the watchdog's own view, through ``prometheus_client``.

One implementation, on the library (the ``prometheus`` extra): it owns the exposition format
(escaping, the OpenMetrics variant a scraper may ask for, gzip, ``name[]`` filters) and adds the
process's own ``process_*`` metrics, where a hand-rolled format had to be kept right by us. The
library is pure Python with no dependencies, so the watchdog stays slim; without it the watchdog
runs as before and only ``--metrics-port`` is refused, saying what to install.

After each poll the loop hands :meth:`MetricsServer.update` a :class:`Poll`; a scrape reads the
latest one through a custom collector, so every scrape sees one poll's consistent numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from airflow_crashsafe.alerting.incidents import Incident
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import COMPONENTS, Observation
from airflow_crashsafe.watchdog.rules import Rules, is_alive

__all__ = ["METRICS", "MetricsServer", "Poll", "PollCollector", "render"]

#: What the endpoint serves: name -> (type, help). Counters get ``_total`` appended on the wire.
METRICS: Mapping[str, tuple[str, str]] = {
    "crashsafe_watchdog_last_poll_timestamp_seconds": ("gauge", "Unix time of the last poll."),
    "crashsafe_watchdog_source_up": ("gauge", "1 if the api-server / metadata DB could be read."),
    "crashsafe_watchdog_component_alive": ("gauge", "1 if at least one job of the component is alive."),
    "crashsafe_watchdog_heartbeat_age_seconds": ("gauge", "Age of the component's newest heartbeat."),
    "crashsafe_watchdog_incidents": ("gauge", "Incidents by state (pending/open) and severity."),
    "crashsafe_watchdog_outbox_pending": ("gauge", "Alert deliveries waiting for a retry."),
    "crashsafe_watchdog_sink_failures": ("counter", "Failed deliveries (after retries) per sink."),
}


def _prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core  # the metric families a custom collector yields
    except ImportError:
        raise ConfigurationError(
            "The metrics endpoint needs prometheus_client: pip install 'airflow-crashsafe[prometheus]', "
            "or drop --metrics-port / metrics_port."
        ) from None
    return prometheus_client


@dataclass(frozen=True)
class Poll:
    """What one poll saw, as the endpoint reports it."""

    observation: Observation
    incidents: Mapping[str, Incident]
    rules: Rules
    outbox_pending: int = 0
    sink_failures: Mapping[str, int] = field(default_factory=dict)


def _samples(poll: Poll) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each metric's (labels, value) pairs for one poll."""
    obs = poll.observation
    samples: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in METRICS}
    samples["crashsafe_watchdog_last_poll_timestamp_seconds"].append(({}, obs.at.timestamp()))
    samples["crashsafe_watchdog_source_up"].append(({"source": obs.source}, float(obs.ok)))
    if obs.ok:
        for component in COMPONENTS:
            jobs = obs.jobs_of(component)
            alive = any(is_alive(j, obs.at, poll.rules.threshold) for j in jobs)
            samples["crashsafe_watchdog_component_alive"].append(({"component": component}, float(alive)))
            beats = [j.latest_heartbeat for j in jobs if j.latest_heartbeat]
            if beats:
                age = (obs.at - max(beats)).total_seconds()
                samples["crashsafe_watchdog_heartbeat_age_seconds"].append(({"component": component}, age))
    counts: dict[tuple[str, str], int] = {}
    for incident in poll.incidents.values():
        state = "open" if incident.opened_at else "pending"
        counts[(state, incident.severity)] = counts.get((state, incident.severity), 0) + 1
    for state in ("pending", "open"):
        for severity in ("warning", "critical"):
            labels = {"state": state, "severity": severity}
            samples["crashsafe_watchdog_incidents"].append((labels, counts.get((state, severity), 0)))
    samples["crashsafe_watchdog_outbox_pending"].append(({}, poll.outbox_pending))
    for sink, failures in sorted(poll.sink_failures.items()):
        samples["crashsafe_watchdog_sink_failures"].append(({"sink": sink}, failures))
    return samples


class PollCollector:
    """A ``prometheus_client`` collector of the latest :class:`Poll` (nothing before the first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._poll: Poll | None = None

    def update(self, poll: Poll) -> None:
        with self._lock:
            self._poll = poll

    def collect(self) -> Iterator[Any]:
        core = _prometheus().core
        with self._lock:
            poll = self._poll
        if poll is None:
            return
        for name, pairs in _samples(poll).items():
            kind, text = METRICS[name]
            label_names = sorted({k for labels, _ in pairs for k in labels})
            family_type = core.CounterMetricFamily if kind == "counter" else core.GaugeMetricFamily
            family = family_type(name, text, labels=label_names)
            for labels, value in pairs:
                family.add_metric([labels[k] for k in label_names], value)
            yield family


def _registry(collector: PollCollector, *, process: bool) -> Any:
    prom = _prometheus()
    registry = prom.CollectorRegistry()
    registry.register(collector)
    if process:
        prom.ProcessCollector(registry=registry)
    return registry


def render(
    observation: Observation,
    incidents: Mapping[str, Incident],
    rules: Rules,
    *,
    outbox_pending: int,
    sink_failures: Mapping[str, int],
) -> str:
    """The text exposition of one poll's metrics (as ``/metrics`` serves it, less ``process_*``)."""
    collector = PollCollector()
    collector.update(Poll(observation, incidents, rules, outbox_pending, sink_failures))
    return str(_prometheus().generate_latest(_registry(collector, process=False)).decode())


class MetricsServer:
    """Serves the latest poll on ``GET /metrics`` from a daemon thread (binds when built).

    :raises ConfigurationError: ``prometheus_client`` is not installed.
    :raises OSError: the address cannot be bound.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9468) -> None:
        prom = _prometheus()
        self.collector = PollCollector()
        self.registry = _registry(self.collector, process=True)
        handler = prom.MetricsHandler.factory(self.registry)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="crashsafe-metrics", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def update(self, poll: Poll) -> None:
        """What the next scrape reports."""
        self.collector.update(poll)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
