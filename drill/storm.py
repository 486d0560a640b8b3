"""The storm scenario (``--scenario storm``): the restart's burst, timeouts, retries and a missed deadline.

The incident's last act: the restarted scheduler re-runs every interrupted load at once on a
warehouse sized for the steady rate; the spike makes loads time out, the timeouts make retries, and
the night finishes after its deadline. This scenario reproduces it with real Airflow and a
warehouse of finite capacity (:mod:`drill.storm_warehouse`), plain operators beside crashsafe, on
one Airflow and one crash, in two variants (:data:`drill.storm_report.VARIANT_TITLES`):

* ``adopt``: the SIGKILL spares the workers, so each load's statement runs on; a plain re-run
  works beside it, a crashsafe re-run adopts it;
* ``lost``: the crash also kills the variant's worker processes and terminates their warehouse
  backends, so every re-run must redo its work and only recovery admission can damp the burst.

Steps: boot, trigger the DAGs of :mod:`drill.storm_dag`, wait until every load runs (waiting for
its source), start the night (sources land every ``--storm-interval`` s) with the watchdog
watching each DAG's deadline (``[[deadlines]]``), SIGKILL the scheduler ``--storm-crash-at`` s into
the night, keep it down ``--outage`` s, restart it, and wait for the runs (at most until the
deadline plus ``--storm-grace``). Every DAG's warehouse is its own, so the sides never slow each
other; each load's active work is sampled for the peak, the server's log counts the timeouts, the
work meter the work redone, the webhook the pages.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from drill import storm_warehouse as wh
from drill.airflow_home import component_env
from drill.cluster import airflow_conn_uri
from drill.components import wait_until
from drill.scenario import TERMINAL_RUN_STATES, Progress, Scenario
from drill.session import DrillSession
from drill.storm_crash import lose_in_flight
from drill.storm_report import StormDag, StormFacts
from drill.work_meter import WorkMeter, summarize

__all__ = ["DAG_SOURCE", "SIDES", "dag_id", "run"]

DAG_SOURCE = Path(__file__).with_name("storm_dag.py")
SIDES = ("plain", "crashsafe")
#: Seconds between "every load runs" and the first source landing.
LEAD = 3.0
EARLY, MISSED = "deadline_at_risk:", "deadline_missed:"
#: ``application_name`` of a load's connection while it waits for its source (see the DAG file).
WAIT_PREFIX = "storm-wait:"


def dag_id(side: str, variant: str) -> str:
    return f"storm_{side}_{variant}"


def _env(args: argparse.Namespace, variants: list[str]) -> dict[str, str]:
    return {
        "CRASHSAFE_STORM_VARIANTS": ",".join(variants),
        "CRASHSAFE_STORM_LOADS": str(args.storm_loads),
        "CRASHSAFE_STORM_STEPS": str(args.storm_steps),
        "CRASHSAFE_STORM_STEP_SECONDS": str(args.storm_step_seconds),
        "CRASHSAFE_STORM_CAPACITY": str(args.storm_capacity),
        "CRASHSAFE_STORM_RETRIES": str(args.storm_retries),
        "CRASHSAFE_STORM_RETRY_DELAY": str(args.storm_retry_delay),
        "CRASHSAFE_STORM_BUDGET": str(args.storm_budget),
    }


def _deadlines(dag_ids: list[str], deadline_at: float) -> list[dict[str, Any]]:
    at = datetime.fromtimestamp(deadline_at, tz=timezone.utc).strftime("%H:%M:%S")
    return [
        {"name": f"{d}@06:00", "dag_id": d, "at": at, "timezone": "UTC", "run_types": ["manual"]}
        for d in dag_ids
    ]


def _patient(step: Callable[[], None], progress: Progress, tries: int = 5) -> None:
    """``step()``, again after an API call timed out (many task processes starting slow the api-server)."""
    for n in range(tries):
        try:
            step()
            return
        except (TimeoutError, urllib.error.URLError) as exc:
            if n == tries - 1:
                raise
            progress(f"the api-server is slow ({exc}); asking again")


def _all_admins_token(scenario: Scenario) -> str:
    """A bearer token for the watchdog's run reads (SimpleAuthManager with all admins hands one out)."""
    with urllib.request.urlopen(f"{scenario.home.api_url}/auth/token", timeout=30) as resp:
        return str(json.loads(resp.read())["access_token"])


def _wait_waiting(url: str, expected: int, progress: Progress, timeout: float = 300.0) -> None:
    """Wait until every load waits for its source (a task is ``running`` long before it gets there)."""
    import psycopg

    def waiting() -> bool:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, %s)",
                (WAIT_PREFIX,),
            ).fetchone()
        return row is not None and int(row[0]) >= expected

    wait_until(f"{expected} loads to wait for their source", waiting, timeout)
    progress(f"{expected} loads wait for their source")


def _wait_runs(scenario: Scenario, until: float, progress: Progress) -> dict[str, float]:
    """Poll the runs until every one ended or ``until``; returns dag_id -> when its run ended."""
    ended: dict[str, float] = {}
    while time.time() < until and len(ended) < len(scenario.run_ids):
        for dag, run_id in scenario.run_ids.items():
            try:
                state = "" if dag in ended else scenario.api.run_state(dag, run_id)
            except (TimeoutError, urllib.error.URLError):
                continue  # a busy api-server: ask again next round
            if state in TERMINAL_RUN_STATES:
                ended[dag] = time.time()
                progress(f"{dag} ended {state}")
        time.sleep(2.0)
    return ended


def run(session: DrillSession, args: argparse.Namespace, progress: Progress) -> StormFacts:
    """Boot, trigger, start the night, crash, restart, wait; the facts for :mod:`drill.storm_report`."""
    variants = ["adopt", "lost"] if args.storm_variant == "both" else [args.storm_variant]
    facts = StormFacts(
        loads=args.storm_loads,
        capacity=args.storm_capacity,
        budget=args.storm_budget,
        steps=args.storm_steps,
        step_seconds=args.storm_step_seconds,
        interval=args.storm_interval,
        statement_timeout=args.storm_timeout,
        retries_allowed=args.storm_retries,
        retry_delay=args.storm_retry_delay,
    )
    dags_dir = session.home.airflow_home / "dags"
    dags_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(DAG_SOURCE, dags_dir / "storm_dags.py")
    url, conn_env, metadata_url = session.warehouse()
    session.warehouse_url = url
    if session.cluster is None:
        raise RuntimeError("the storm scenario needs the drill's own PostgreSQL cluster (no --warehouse-url)")
    wh.install(url, statement_timeout=args.storm_timeout)
    ids = [dag_id(side, v) for v in variants for side in SIDES]
    env = component_env(
        session.home,
        dags_folder=dags_dir,
        metadata_url=metadata_url,
        extra={
            **conn_env,
            **_env(args, variants),
            "AIRFLOW_CONN_STORM_WAREHOUSE": airflow_conn_uri(wh.loader_url(url)),
        },
        health_check_threshold=args.health_check_threshold,
        parallelism=len(ids) * (args.storm_loads + 1) + 8,  # workers are not the bottleneck here
    )
    progress(f"AIRFLOW_HOME {session.home.airflow_home}; migrating the metadata DB")
    session.migrate(env)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    scenario = session.new_scenario(env, dag_ids=ids, long_task_prefixes=("load_",), logical_date=now)
    scenario.boot()
    scenario.trigger({})
    _patient(lambda: scenario.wait_running(expected=len(ids) * args.storm_loads), progress)
    _wait_waiting(url, len(ids) * args.storm_loads, progress)
    facts.night_start = night = time.time() + LEAD
    # Whole seconds: the watchdog's [[deadlines]] entry is a time of day to the second.
    facts.deadline_at = float(int(night + args.storm_deadline))
    wh.start_night(url, ids, night, args.storm_interval)
    progress(
        f"night starts: a source lands every {args.storm_interval:g} s; deadline (06:00) in "
        f"{args.storm_deadline:g} s"
    )
    session.start_watchdog(
        ["--interval", str(args.watch_interval), "--threshold", str(args.watch_threshold)],
        config={
            "watch": {
                "deadline_default_duration": args.storm_steps * args.storm_step_seconds,
                "deadline_refresh": 5,
                # Only tonight's deadline matters (yesterday's passed before the watchdog began
                # watching, so it pages nothing anyway); a short keep keeps each poll's reads small.
                "deadline_keep": 900,
            },
            "deadlines": _deadlines(ids, facts.deadline_at),
        },
        token=_all_admins_token(scenario),
    )
    meter = session.meter = WorkMeter(url).start()
    probe = wh.CapacityProbe(url, args.storm_capacity).start()
    try:
        lost_dags = [dag_id(s, "lost") for s in SIDES] if "lost" in variants else []
        lost_tis = [
            str(ti["id"])
            for d in lost_dags
            for ti in scenario.api.task_instances(d, scenario.run_ids[d])
            if ti["state"] == "running"
        ]
        time.sleep(max(0.0, night + args.storm_crash_at - time.time()))
        scheduler = scenario.components["scheduler"]
        survivors = scheduler.crash()
        facts.crashed_at = scenario.crashed_at = time.time()
        progress(f"SIGKILL scheduler (pid {scheduler.pid}); {len(survivors)} worker processes survive it")
        if lost_dags:
            lost = facts.lost["lost"] = lose_in_flight(session, url, lost_dags, lost_tis)
            progress(
                f"lost variant: killed {lost['processes']} of its worker processes, terminated "
                f"{lost['backends']} of its backends"
            )
        time.sleep(args.outage)
        scenario.start("scheduler")
        facts.restarted_at = scenario.restarted_at = time.time()
        progress("restarting scheduler")
        ended = _wait_runs(scenario, facts.deadline_at + args.storm_grace, progress)
        # The missed-deadline pages come one poll after the deadline at most.
        time.sleep(max(0.0, facts.deadline_at + 2 * args.watch_interval + 2 - time.time()))
    finally:
        probe.stop()
        work = meter.stop()
        session.meter = None
    progress("report")
    timeouts = wh.timeouts_in_log(session.home.logs / "postgres.log")
    by_dag = summarize(work.labels)
    deliveries = session.receiver.snapshot() if session.receiver else []
    for variant in variants:
        for side in SIDES:
            dag = StormDag(dag_id(side, variant), side, variant)
            _fill(dag, scenario, ended.get(dag.dag_id), facts.crashed_at or 0.0)
            dag.peak, dag.above_seconds = probe.peak.get(dag.dag_id, 0), probe.above.get(dag.dag_id, 0.0)
            dag.timeouts = len(timeouts.get(dag.dag_id, []))
            measured = by_dag.get(dag.dag_id)
            if measured is not None:
                dag.executions = int(measured.executions)
                dag.needed, dag.redone = measured.needed, measured.redone
            for d in deliveries:
                if d.alert.get("event") != "trigger" or d.at < facts.night_start:
                    continue
                if d.key.startswith(f"{EARLY}{dag.dag_id}:") and dag.early_page_at is None:
                    dag.early_page_at = d.at
                if d.key.startswith(f"{MISSED}{dag.dag_id}:") and dag.missed_page_at is None:
                    dag.missed_page_at = d.at
            facts.dags.append(dag)
    if probe.failed:
        facts.notes.append(f"{probe.failed} capacity samples failed")
    watchdog = session.watchdog.process if session.watchdog else None
    if watchdog is not None and not watchdog.alive():
        facts.notes.append(f"the watchdog exited early, no page could come:\n{watchdog.tail(5)}")
    facts.notes += session.notes
    return facts


def _fill(dag: StormDag, scenario: Scenario, ended: float | None, crashed_at: float) -> None:
    """The run's state and end, and per load its tries: retries after a failure, loads run twice.

    A retry counts when a try that started after the crash failed and another followed; the try
    the crash itself lost is the crash's, not a retry's.
    """
    from drill.attempts import parse_time

    run_id = scenario.run_ids[dag.dag_id]
    run = scenario.api.get(f"/dags/{dag.dag_id}/dagRuns/{run_id}")
    dag.run_state = str(run["state"])
    tis = scenario.api.task_instances(dag.dag_id, run_id)
    if dag.run_state in TERMINAL_RUN_STATES:
        # The last task's end: a busy scheduler marks the run itself done seconds later.
        ends = [t for ti in tis if (t := parse_time(ti.get("end_date"))) is not None]
        dag.finished_at = max(ends, default=None) or parse_time(run.get("end_date")) or ended
    for ti in tis:
        if not ti["task_id"].startswith("load_"):
            continue
        tries = scenario.api.tries(dag.dag_id, run_id, ti["task_id"])
        if len(tries) > 1:
            dag.loads_rerun += 1
        dag.retries += sum(
            t.get("state") in ("failed", "up_for_retry")
            and (parse_time(t.get("start_date")) or 0) > crashed_at
            for t in tries[:-1]
        )
