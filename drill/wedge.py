"""The wedge scenario (``--scenario wedge``): SIGKILL the scheduler inside its critical section.

A scheduler killed while its metadata-DB session holds the pool row locks leaves that session
``idle in transaction`` for as long as any process it forked (LocalExecutor workers) keeps the
socket open; the restarted scheduler then heartbeats but never queues a task (docs/design.md,
"How Airflow behaves on a crash"). This scenario makes that happen on purpose:

1. boot Airflow on the PostgreSQL metadata DB with one DAG of parallel waiting tasks
   (:mod:`drill.wedge_dag`) and a short scheduler loop, and wait until every task runs;
2. **land the kill**: poll ``pg_locks`` for a backend holding ``RowShareLock`` on ``slot_pool``;
   when one shows, SIGSTOP the scheduler, check that the backend belongs to it (its client port
   is one of the scheduler's sockets) and still holds the lock, then SIGKILL it — a kill at that
   instant. If the lock was already released, SIGCONT and poll on (one more try). If the kill
   closed the session after all (no forked process held its socket), restart and try again;
3. after the outage (longer than the health-check threshold), restart the scheduler;
4. **plain phase**: watch the reset task instances stay ``scheduled`` for ``--give-up`` seconds,
   then record the orphaned backend (pid, age, locks, the processes holding its socket);
5. **crashsafe phase**: start ``airflow-crashsafe watch --db-url ... --heal`` beside Airflow and
   measure the page naming the open transaction, the recovery (the tasks leave ``scheduled``) and
   the end of the run.

Why two phases of one Airflow rather than two Airflows: the wedge is the scheduler's, not the
DAG's, so plain and crashsafe differ only in what runs beside Airflow. The crashsafe deployment
adds nothing that could prevent the wedge before the watchdog acts, so the first ``--give-up``
seconds after the restart are exactly what plain Airflow gets, and one kill (the slow, lucky part)
serves both sides. Times to page and recovery are reported from the restart and from the
watchdog's start.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from drill import wedge_report
from drill.airflow_home import component_env
from drill.capability import Capability
from drill.cluster import libpq_url
from drill.components import drill_processes
from drill.facts import DrillFacts
from drill.pg_locks import Backend, MetadataProbe, socket_holders, socket_ports
from drill.scenario import Progress, Scenario
from drill.session import DrillSession
from drill.waiting import sleep_reporting
from drill.watch import watchdog_accepts
from drill.wedge_report import WedgeFact, is_wedge_page

__all__ = ["CAPABILITY", "DAG_ID", "DAG_SOURCE", "TASK_PREFIX", "Wedge", "run"]

#: The wedge's report, a capability of its own (mypy checks the module against the protocol).
CAPABILITY: Capability = wedge_report

#: The wedge DAG (the file is copied into the dags folder; these names must match it).
DAG_SOURCE = Path(__file__).with_name("wedge_dag.py")
DAG_ID = "drill_wedge"
TASK_PREFIX = "wait_"
#: ``[scheduler] scheduler_idle_sleep_time``: a short loop enters the critical section more often.
IDLE_SLEEP = "0.2"
#: How long after the SIGKILL the session must still hold the pool lock to count as orphaned.
SETTLE = 2.0


class Wedge:
    """Lands the kill, restarts, watches the wedge, then the healing; records it all in ``fact``."""

    def __init__(
        self,
        scenario: Scenario,
        probe: MetadataProbe,
        pg_port: int,
        fact: WedgeFact,
        processes: Callable[[], list[psutil.Process]],
    ) -> None:
        self.scenario = scenario
        self.probe = probe
        self.pg_port = pg_port
        self.fact = fact
        self.processes = processes
        self.progress: Progress = scenario.progress

    def _scheduler_pid(self) -> int:
        scheduler = self.scenario.components["scheduler"]
        if not scheduler.alive() or scheduler.pid is None:
            raise RuntimeError(f"the scheduler exited:\n{scheduler.tail()}")
        return scheduler.pid

    def _freeze_holding_lock(self, deadline: float) -> Backend | None:
        """Stop the scheduler at an instant its session holds the pool lock (it stays stopped)."""
        pid = self._scheduler_pid()
        while time.monotonic() < deadline:
            lockers = self.probe.pool_lockers()
            if not lockers:
                time.sleep(0.005)
                continue
            os.kill(pid, signal.SIGSTOP)
            self.fact.tries += 1
            time.sleep(0.05)  # a COMMIT already on the wire is processed: it does not count
            ports = socket_ports(pid, self.pg_port)
            for backend in filter(None, map(self.probe.backend, lockers)):
                if backend.client_port in ports and backend.holds_pool_lock:
                    return backend
            os.kill(pid, signal.SIGCONT)
        return None

    def kill(self, timeout: float) -> None:
        """SIGKILL the scheduler inside its critical section, until its session outlives it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            backend = self._freeze_holding_lock(deadline)
            if backend is None:
                break
            scheduler = self.scenario.components["scheduler"]
            self.fact.scheduler_pid = scheduler.pid
            survivors = scheduler.crash()
            self.fact.kills += 1
            self.fact.killed_at = self.scenario.crashed_at = time.time()
            time.sleep(SETTLE)
            after = self.probe.backend(backend.pid)
            if after is not None and after.holds_pool_lock:
                self.fact.landed = True
                self._record(after)
                self.progress(
                    f"SIGKILL scheduler (pid {scheduler.pid}) inside its critical section on try "
                    f"{self.fact.tries}: backend {after.pid} left {after.state}, holding "
                    f"{', '.join(after.locks)}; {len(survivors)} forked processes survive"
                )
                return
            self.progress(
                f"try {self.fact.tries}: the kill closed backend {backend.pid} (no forked process "
                "held its socket); restarting the scheduler to try again"
            )
            self.scenario.start("scheduler")
        self.progress(f"the kill never landed inside the critical section ({self.fact.tries} tries)")

    def _record(self, backend: Backend) -> None:
        f = self.fact
        f.backend_pid, f.backend_state, f.backend_age = backend.pid, backend.state, backend.transaction_age
        f.locks, f.advisory_lock = list(backend.locks), backend.advisory_lock
        f.backend_application = backend.application_name
        f.began_after_heartbeat = self.probe.began_after_heartbeat(backend.pid)
        if backend.client_port is not None:
            f.socket_holders = len(socket_holders(backend.client_port, self.processes()))

    def restart(self, outage: float, threshold: int) -> None:
        self.progress(f"waiting {outage:.0f} s (> scheduler_health_check_threshold {threshold} s)")
        sleep_reporting(outage, self.progress.waiting("the outage to pass"))
        self.scenario.start("scheduler")
        self.fact.restarted_at = self.scenario.restarted_at = time.time()
        self.progress("restarting scheduler")

    def _waiting(self) -> int:
        """Task instances not yet queued (``scheduled``, or reset to no state and not scheduled yet)."""
        states = self.probe.ti_states(DAG_ID)
        return states.get("scheduled", 0) + states.get("none", 0)

    def watch_plain(self, give_up: float) -> None:
        """The plain phase: do the reset tasks stay ``scheduled`` for ``give_up`` seconds?"""
        end, first_stuck, scheduled = time.monotonic() + give_up, None, 0
        tick = self.progress.waiting(
            "the reset tasks to queue (plain phase)", lambda: f"{scheduled} scheduled"
        )
        while time.monotonic() < end:
            tick()
            self._scheduler_pid()
            scheduled = self._waiting()
            if scheduled and first_stuck is None:
                first_stuck = time.monotonic()
                self.progress(f"{scheduled} reset task instances are scheduled; waiting for them to queue")
            if first_stuck is not None and not scheduled:
                break
            time.sleep(2.0)
        f = self.fact
        f.stuck = scheduled
        f.stuck_seconds = time.monotonic() - first_stuck if first_stuck is not None else 0.0
        backend = self.probe.backend(f.backend_pid or 0)
        if backend is not None:
            self._record(backend)
        f.wedged = bool(scheduled) and backend is not None and backend.holds_pool_lock
        self.progress(
            f"plain phase: {scheduled} tasks still scheduled after {f.stuck_seconds:.0f} s; "
            + (
                f"backend {f.backend_pid} {f.backend_state} {f.backend_age or 0:.0f} s"
                if backend
                else "backend gone"
            )
            + (": WEDGED" if f.wedged else ": not wedged")
        )

    def watch_heal(self, session: DrillSession, args: argparse.Namespace, db_url: str) -> None:
        """The crashsafe phase: the healing watchdog's page, the recovery, the end of the run."""
        f = self.fact
        f.heal_available = watchdog_accepts("--heal")
        if not f.heal_available:
            self.progress("this checkout's watchdog has no --heal: the crashsafe phase cannot run")
            return
        session.start_watchdog(
            [
                *("--interval", str(args.watch_interval), "--threshold", str(args.watch_threshold)),
                *("--db-url", db_url, "--heal"),
            ]
        )
        f.heal_started_at = time.time()
        receiver, watchdog = session.receiver, session.watchdog
        assert receiver is not None  # start_watchdog sets both
        assert watchdog is not None
        end = time.monotonic() + max(args.give_up, 60.0) + 3 * args.watch_interval
        tick = self.progress.waiting("the watchdog's page and the recovery (crashsafe phase)")
        while time.monotonic() < end and (f.page_at is None or f.recovered_at is None):
            tick()
            if watchdog.process is not None and not watchdog.process.alive():
                self.progress(f"the watchdog exited:\n{watchdog.tail()}")
                break
            page = next(
                (
                    d
                    for d in receiver.snapshot()
                    if d.alert.get("event") == "trigger" and is_wedge_page(d.key, d.summary())
                ),
                None,
            )
            if page is not None and f.page_at is None:
                f.page_at, f.page_key, f.page_summary = page.at, page.key, page.summary()
                self.progress(f"page: {f.page_summary}")
            if f.backend_gone_at is None and self.probe.backend(f.backend_pid or 0) is None:
                f.backend_gone_at = time.time()
                self.progress(f"backend {f.backend_pid} is gone")
            if f.recovered_at is None and not self._waiting():
                f.recovered_at = time.time()
                self.progress("recovered: the restarted scheduler queued the reset tasks")
            time.sleep(1.0)
        if f.recovered_at is None:
            return
        try:
            states = self.scenario.wait_finished()
        except TimeoutError as exc:
            self.progress(str(exc))
            return
        f.run_state, f.finished_at = states.get(DAG_ID), time.time()


def run(session: DrillSession, args: argparse.Namespace, progress: Progress) -> DrillFacts:
    """Boot, land the kill, restart, then the plain and the crashsafe phase; the facts for the report."""
    fact = WedgeFact(tasks=args.wedge_tasks, give_up=args.give_up)
    dags_dir = session.home.airflow_home / "dags"
    dags_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(DAG_SOURCE, dags_dir / f"{DAG_ID}.py")
    _, conn_env, metadata_url = session.warehouse()
    if session.cluster is None or not metadata_url.startswith("postgresql"):
        raise RuntimeError("the wedge scenario needs the PostgreSQL metadata DB (--metadata postgres)")
    db_url = libpq_url(session.cluster.url("airflow"))
    env = component_env(
        session.home,
        dags_folder=dags_dir,
        metadata_url=metadata_url,
        extra={
            **conn_env,
            "CRASHSAFE_DRILL_WEDGE_TASKS": str(args.wedge_tasks),
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": IDLE_SLEEP,
        },
        health_check_threshold=args.health_check_threshold,
        parallelism=args.wedge_tasks + 8,  # free slots: the critical section is entered every loop
    )
    progress(f"AIRFLOW_HOME {session.home.airflow_home}; migrating the metadata DB (postgresql)")
    session.migrate(env)
    scenario = session.new_scenario(
        env, dag_ids=[DAG_ID], long_task_prefixes=(TASK_PREFIX,), logical_date="2024-01-01T00:00:00Z"
    )
    scenario.boot()
    scenario.trigger({"work_seconds": args.work_seconds})
    scenario.wait_running(expected=args.wedge_tasks)
    probe = MetadataProbe(db_url)
    try:
        wedge = Wedge(
            scenario,
            probe,
            session.cluster.port,
            fact,
            lambda: drill_processes(session.sessions, session.home.airflow_home),
        )
        wedge.kill(args.kill_timeout)
        if fact.landed:
            wedge.restart(args.outage, args.health_check_threshold)
            wedge.watch_plain(args.give_up)
        if fact.wedged:
            wedge.watch_heal(session, args, db_url)
    finally:
        probe.close()
    facts = DrillFacts(None, None, crashed_at=fact.killed_at, restarted_at=fact.restarted_at, wedge=fact)
    progress("report")
    facts.wall_seconds = progress.elapsed()
    facts.notes = session.notes
    facts.sessions = sorted(session.sessions)
    return facts
