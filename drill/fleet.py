"""The Celery fleet the drill boots: Redis, two schedulers, triggerer, api-server, dag-processor, two hosts.

Everything is a throwaway process the drill starts and kills: Debian's ``redis-server`` as broker
and result backend (:mod:`drill.redis_broker`), the Airflow components of the LocalExecutor drill
plus a second scheduler, and two Celery workers, each on its own simulated host
(:mod:`drill.hosts`). The metadata DB and the crashsafe store are the drill's PostgreSQL, shared by
every host — on a fleet the store must be one shared database.

Each host reaches the api-server's execution API (``[core] execution_api_server_url``: task
heartbeats, state changes, connections) through a proxy of its own (:mod:`drill.proxy`), so a
scenario can partition one host from the api-server while it still reaches the warehouse, the
store and the vendors directly.

Placement: so that a fault on one host is known to hit both DAGs, a cluster policy
(``airflow_local_settings.py`` in ``$AIRFLOW_HOME/config``) routes the first tries of the fault's
tasks to queue ``host-b`` (only ``worker-b`` consumes it) and the others to ``host-a``; once all of
them run, ``worker-a`` also consumes ``host-b`` (:meth:`Fleet.share_queues`), as every worker of a
real fleet serves the same queue, so re-runs land on the surviving host. The same policy gives
every drill task one retry after 2 s: a task whose worker vanished is failed by the heartbeat
timeout and needs a retry to run again at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.airflow_home import DrillHome
from drill.components import Component, airflow_component
from drill.hosts import SimulatedHost, worker_argv
from drill.proxy import BlackholeProxy
from drill.redis_broker import RedisBroker

__all__ = ["HOST_A", "HOST_B", "HOST_B_PREFIXES", "Fleet", "FleetTimings", "fleet_env", "write_policy"]

HOST_A, HOST_B = "worker-a", "worker-b"
#: Tasks whose first try runs on worker-b (the host the faults hit): one load of each DAG per
#: region and every payment push; the other loads run on worker-a.
HOST_B_PREFIXES = ("load_revenue_", "merge_revenue_", "push_payment_")
HOST_A_PREFIXES = ("append_lines_", "overwrite_lines_")

POLICY = '''"""The crash drill's cluster policy (written by drill/fleet.py): placement and one quick retry."""

from datetime import timedelta

DRILL_DAGS = {dag_ids!r}
HOST_B_PREFIXES = {host_b!r}
HOST_A_PREFIXES = {host_a!r}


def task_policy(task):
    if task.dag_id not in DRILL_DAGS:
        return
    task.retries = max(task.retries or 0, 1)
    task.retry_delay = timedelta(seconds=2)
    if task.task_id.startswith(HOST_B_PREFIXES):
        task.queue = "host-b"
    elif task.task_id.startswith(HOST_A_PREFIXES):
        task.queue = "host-a"
'''


@dataclass(frozen=True)
class FleetTimings:
    """The fleet's scaled-down timeouts (seconds)."""

    #: ``[scheduler] task_instance_heartbeat_timeout``: a task unheard of this long is failed.
    heartbeat_timeout: int = 20
    #: ``[celery_broker_transport_options] visibility_timeout``: an unacknowledged task is redelivered.
    visibility_timeout: int = 3600
    #: ``[crashsafe] adoption_timeout_seconds``: how long a re-run waits for an in-flight unit.
    adoption_timeout: int = 600
    concurrency_a: int = 10
    concurrency_b: int = 8


def write_policy(airflow_home: Path, dag_ids: list[str]) -> Path:
    """``$AIRFLOW_HOME/config/airflow_local_settings.py`` (Airflow puts that directory on sys.path)."""
    config = airflow_home / "config"
    config.mkdir(parents=True, exist_ok=True)
    path = config / "airflow_local_settings.py"
    path.write_text(POLICY.format(dag_ids=set(dag_ids), host_b=HOST_B_PREFIXES, host_a=HOST_A_PREFIXES))
    return path


def fleet_env(base: dict[str, str], broker: RedisBroker, timings: FleetTimings) -> dict[str, str]:
    """The LocalExecutor drill's environment turned into a Celery fleet's."""
    return {
        **base,
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        # Each host's own hostname (set inside its UTS namespace), not a DNS lookup of it.
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "socket.gethostname",
        "AIRFLOW__CELERY__BROKER_URL": broker.url(0),
        "AIRFLOW__CELERY__RESULT_BACKEND": broker.url(1),
        "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
        "AIRFLOW__CELERY__TASK_ACKS_LATE": "True",
        "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": str(timings.visibility_timeout),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": str(timings.heartbeat_timeout),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
        "AIRFLOW__CRASHSAFE__ADOPTION_TIMEOUT_SECONDS": str(timings.adoption_timeout),
    }


@dataclass
class Fleet:
    """The fleet's broker, proxies and hosts; the Airflow components live in the scenario."""

    home: DrillHome
    env: dict[str, str]
    broker: RedisBroker
    timings: FleetTimings
    starts: dict[str, int] = field(default_factory=dict)
    proxies: dict[str, BlackholeProxy] = field(default_factory=dict)
    hosts: dict[str, SimulatedHost] = field(default_factory=dict)

    def component(self, name: str, as_name: str | None = None) -> Component:
        """An Airflow component (``scheduler`` started twice is ``scheduler`` and ``scheduler-2``)."""
        component = airflow_component(name, self.env, self.home.logs, self.starts)
        component.name = as_name or name
        return component

    def host(
        self, hostname: str, queues: list[str], concurrency: int, extra_env: dict[str, str] | None = None
    ) -> SimulatedHost:
        """A (new) worker host reaching the execution API through its own proxy."""
        if hostname not in self.proxies:
            self.proxies[hostname] = BlackholeProxy("127.0.0.1", self.home.api_port).start()
        env = {
            **self.env,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.proxies[hostname].url}/execution/",
            **(extra_env or {}),
        }
        self.starts[hostname] = self.starts.get(hostname, 0) + 1
        n = self.starts[hostname]
        log = self.home.logs / (f"{hostname}.log" if n == 1 else f"{hostname}-{n}.log")
        component = Component(hostname, worker_argv(hostname, queues, concurrency), env, log)
        host = self.hosts[hostname] = SimulatedHost(hostname, queues, concurrency, component)
        return host

    def celery(self) -> Any:
        """A Celery app on the broker, for remote control only (no Airflow import)."""
        from celery import Celery  # type: ignore[import-untyped]

        return Celery("crashsafe-drill", broker=self.broker.url(0))

    def workers_ready(self) -> set[str]:
        """Hostnames of the workers answering a ping."""
        replies = self.celery().control.ping(timeout=2.0) or []
        return {name.split("@", 1)[1] for reply in replies for name in reply}

    def share_queues(self) -> None:
        """worker-a also consumes ``host-b``: re-runs of worker-b's tasks may land on either host."""
        self.celery().control.add_consumer(
            "host-b", destination=[f"celery@{HOST_A}"], reply=True, timeout=5.0
        )

    def reboot_workers(self, extra_env: dict[str, str] | None = None) -> list[Component]:
        """Replace both hosts by new ones (same names and queues) with ``extra_env`` on top."""
        started = []
        for old in list(self.hosts.values()):
            old.component.kill_group()
            host = self.host(old.hostname, old.queues, old.concurrency, extra_env)
            host.start()
            started.append(host.component)
        self.wait_workers(set(self.hosts))
        return started

    def unshare_queues(self) -> None:
        """Back to the placement of first tries: worker-a stops consuming ``host-b``."""
        self.celery().control.cancel_consumer(
            "host-b", destination=[f"celery@{HOST_A}"], reply=True, timeout=5.0
        )

    def wait_workers(self, names: set[str], timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for host in self.hosts.values():
                if host.hostname in names and not host.alive():
                    raise RuntimeError(f"{host.hostname} exited:\n{host.component.tail()}")
            if names <= self.workers_ready():
                return
            time.sleep(2)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for Celery workers {sorted(names)}")

    def stop(self) -> None:
        """Kill every host's namespace, stop the proxies and the broker."""
        for host in self.hosts.values():
            host.component.kill_group()
        for proxy in self.proxies.values():
            proxy.stop()
        self.broker.stop()
