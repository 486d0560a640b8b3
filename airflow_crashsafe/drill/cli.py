"""``airflow-crashsafe drill``: the crash drill, from a fresh machine to a side-by-side report.

Exit codes: 0 every crashsafe invariant held; 1 one broke; 3 the drill itself could not run or
proved nothing (no load was interrupted). The plain DAG's damage is expected and only reported.
"""

from __future__ import annotations

import argparse
import shutil
import signal
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from airflow_crashsafe.drill import facts as facts_mod
from airflow_crashsafe.drill.airflow_home import component_env, repo_root
from airflow_crashsafe.drill.components import wait_until
from airflow_crashsafe.drill.report import all_broken, inconclusive, render
from airflow_crashsafe.drill.scenario import Progress, Scenario, ScenarioTimings
from airflow_crashsafe.drill.session import DrillSession
from airflow_crashsafe.drill.work_meter import WorkMeter

__all__ = ["EXIT_BROKEN", "EXIT_DRILL_FAILED", "EXIT_OK", "add_arguments", "run"]

EXIT_OK, EXIT_BROKEN, EXIT_DRILL_FAILED = 0, 1, 3
DAGS = {
    "plain": ("nightly_revenue_plain", "drill_plain"),
    "crashsafe": ("nightly_revenue_crashsafe", "drill_crashsafe"),
}
LONG_TASK_PREFIXES = ("load_revenue_", "append_lines_", "merge_revenue_", "overwrite_lines_")
PUSH_PREFIX = "push_payment_"
VENDOR_NAMES = ("naive", "keyed")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The drill's options (the console script calls this on its ``drill`` subparser)."""
    a = parser.add_argument
    a("--warehouse-url", help="existing PostgreSQL warehouse (default: a throwaway cluster)")
    a(
        "--metadata",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="Airflow metadata DB: embedded SQLite or the throwaway PostgreSQL cluster",
    )
    a("--dags", choices=["both", "plain", "crashsafe"], default="both")
    a("--regions", type=int, default=7, help="regions per DAG; each has two parallel loads (default 7)")
    a(
        "--payments",
        type=int,
        default=2,
        help="payments pushed per vendor and DAG while the loads run (default 2; 0: no vendor push)",
    )
    a(
        "--work-seconds",
        type=int,
        default=150,
        help="how long each load works in the warehouse (default 150: it must outlive the outage "
        "and the restarted scheduler's re-run start-up, so that the re-runs find it in flight)",
    )
    a("--kill-after", type=float, default=10.0, help="seconds after all loads run before the SIGKILL")
    a("--outage", type=float, default=40.0, help="seconds the scheduler stays down")
    a(
        "--health-check-threshold",
        type=int,
        default=30,
        help="[scheduler] scheduler_health_check_threshold (the outage must exceed it)",
    )
    a(
        "--watch-threshold",
        type=int,
        help="heartbeat age, s, at which the watchdog alerts (default: --health-check-threshold)",
    )
    a(
        "--watch-interval",
        type=float,
        default=10.0,
        help="the watchdog's poll interval, s (default 10, its own default; 0: no watchdog)",
    )
    a(
        "--logical-date",
        help="logical date of both runs (default 2024-01-01, or now "
        "with --warehouse-url so earlier drills' fences do not interfere)",
    )
    a("--workdir", help="parent of the temporary AIRFLOW_HOME (default: system temp)")
    a("--keep", action="store_true", help="keep the temporary AIRFLOW_HOME and logs")
    a("--facts-json", type=Path, help="also write the raw facts here (JSON)")


def _crashsafe_available() -> bool:
    return (repo_root() / "airflow_crashsafe" / "operators" / "sql.py").exists()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Run the drill; see the module docstring for exit codes."""
    progress = Progress()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    drill = DrillSession(args, progress)
    scenario: Scenario | None = None
    rc, failed = EXIT_DRILL_FAILED, True
    try:
        scenario = _run(drill, args, progress)
        facts = _collect(drill, scenario, args, progress)
        print(render(facts), flush=True)
        if args.facts_json:
            args.facts_json.write_text(facts.to_json())
        rc = EXIT_BROKEN if all_broken(facts) else EXIT_OK
        if rc == EXIT_OK and inconclusive(facts):
            rc = EXIT_DRILL_FAILED
        failed = rc != EXIT_OK
    except KeyboardInterrupt:
        progress("interrupted")
    except Exception as exc:
        progress(f"drill failed: {type(exc).__name__}: {exc}")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            left = drill.cleanup(scenario)
            progress(
                f"cleanup done: {left} drill processes left" if left else "cleanup done: no process left"
            )
            if left:
                rc = max(rc, EXIT_DRILL_FAILED)
            if args.keep or failed:
                progress(
                    f"AIRFLOW_HOME and logs kept in {drill.home.root} (component logs: {drill.home.logs})"
                    + (f"; PostgreSQL data in {drill.pg_outside}" if drill.pg_outside else "")
                )
            else:
                drill.home.remove()
                if drill.pg_outside is not None:
                    shutil.rmtree(drill.pg_outside, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, previous)
    return rc


def _watch_threshold(args: argparse.Namespace) -> int:
    return int(args.watch_threshold or args.health_check_threshold)


def _start_watchdog(drill: DrillSession, args: argparse.Namespace) -> None:
    from airflow_crashsafe.drill.watch import WatchdogProcess, WebhookReceiver

    drill.receiver = WebhookReceiver()
    options = ["--interval", str(args.watch_interval), "--threshold", str(_watch_threshold(args))]
    drill.watchdog = WatchdogProcess(drill.home.api_url, drill.receiver.url, drill.home.logs, options=options)
    drill.watchdog.start()
    drill.sessions.add(drill.watchdog.pid or -1)
    drill.progress(
        f"watchdog started beside Airflow (pid {drill.watchdog.pid}), alerts to {drill.receiver.url}"
    )


def _run(drill: DrillSession, args: argparse.Namespace, progress: Progress) -> Scenario:
    from airflow_crashsafe.drill.vendors import DrillVendors

    keys = drill.keys = ["plain", "crashsafe"] if args.dags == "both" else [args.dags]
    if "crashsafe" in keys and not _crashsafe_available():
        keys.remove("crashsafe")
        drill.notes.append("crashsafe operators not installed yet: ran the plain DAG only")
        progress("NOTICE: airflow_crashsafe.operators.sql is missing; running the plain DAG alone")
    if not keys:
        raise RuntimeError("no DAG to run")
    dags_dir = drill.home.airflow_home / "dags"
    dags_dir.mkdir()
    for key in keys:
        shutil.copy(repo_root() / "dags_examples" / f"{DAGS[key][0]}.py", dags_dir)
    warehouse_url, conn_env, metadata_url = drill.warehouse()
    drill.warehouse_url = warehouse_url
    drill.vendors = DrillVendors.start()
    progress(f"vendors listening: naive {drill.vendors.naive.url}, key-honouring {drill.vendors.keyed.url}")
    extra = {
        **conn_env,
        **drill.vendors.env(),
        "CRASHSAFE_DRILL_REGIONS": str(args.regions),
        "CRASHSAFE_DRILL_PAYMENTS": str(args.payments),
    }
    running = (2 * args.regions + len(VENDOR_NAMES) * args.payments) * len(keys)
    env = component_env(
        drill.home,
        dags_folder=dags_dir,
        metadata_url=metadata_url,
        extra=extra,
        health_check_threshold=args.health_check_threshold,
        parallelism=max(32, running + 4),  # every long task must run at once to be caught by the crash
    )
    progress(
        f"AIRFLOW_HOME {drill.home.airflow_home}; migrating the metadata DB ({metadata_url.split(':')[0]})"
    )
    migrate = drill.component("db-migrate", env)
    migrate.start()
    drill.sessions.add(migrate.pid or -1)
    if migrate.proc is None or migrate.proc.wait(timeout=300) != 0:
        raise RuntimeError(f"airflow db migrate failed:\n{migrate.tail()}")
    timings = ScenarioTimings(
        work_seconds=args.work_seconds,
        kill_after=args.kill_after,
        outage=args.outage,
        health_check_threshold=args.health_check_threshold,
    )
    scenario = Scenario(
        home=drill.home,
        dag_ids=[DAGS[k][0] for k in keys],
        long_task_prefixes=(*LONG_TASK_PREFIXES, PUSH_PREFIX),
        logical_date=_logical_date(args),
        timings=timings,
        make_component=lambda name: drill.component(name, env),
        progress=progress,
        on_start=lambda c: drill.sessions.add(c.pid or -1),
    )
    scenario.boot()
    if args.watch_interval > 0:
        _start_watchdog(drill, args)
    if drill.warehouse_url.startswith("postgres"):
        # Counts, server-side, every execution of every load (abandoned attempts' included).
        drill.meter = WorkMeter(drill.warehouse_url).start()
    scenario.trigger({"work_seconds": args.work_seconds})
    scenario.wait_running(expected=running)
    pushes = len(VENDOR_NAMES) * args.payments
    vendors = drill.vendors

    def in_flight() -> bool:
        return all(vendors.received_from(DAGS[k][0]) >= pushes for k in keys)

    wait_until("every payment push to reach its vendor", in_flight, 120)
    if pushes:
        progress(f"{pushes * len(keys)} payment pushes in flight (the vendors hold them)")
    scenario.crash_and_restart()
    scenario.wait_reset(release=vendors.release.set)
    scenario.wait_finished()
    if drill.meter is not None:
        drill.work = drill.meter.stop()
    return scenario


def _logical_date(args: argparse.Namespace) -> str:
    if args.logical_date:
        return str(args.logical_date)
    if args.warehouse_url:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "2024-01-01T00:00:00Z"


def _collect(
    drill: DrillSession, scenario: Scenario, args: argparse.Namespace, progress: Progress
) -> facts_mod.DrillFacts:
    from airflow_crashsafe.drill.audit_view import audit_facts
    from airflow_crashsafe.drill.report_work import WorkReport, rerun_starts
    from airflow_crashsafe.drill.vendors import payment_facts
    from airflow_crashsafe.drill.watch import alert_fact

    day = scenario.logical_date[:10]
    sides: dict[str, facts_mod.DagFacts | None] = {"plain": None, "crashsafe": None}
    payments: dict[str, list[facts_mod.PaymentFact]] = {}
    for key in drill.keys:
        dag_id, schema = DAGS[key]
        sides[key] = facts_mod.collect_dag_facts(
            scenario.api,
            dag_id=dag_id,
            run_id=scenario.run_ids[dag_id],
            logs_dir=drill.home.task_logs,
            warehouse_url=drill.warehouse_url,
            schema=schema,
            day=day,
            long_task_prefixes=list(LONG_TASK_PREFIXES),
            fenced=key == "crashsafe",
        )
        if drill.vendors is not None and args.payments:
            intended = [
                (v, f"p{i:02d}", f"{PUSH_PREFIX}{v}_p{i:02d}")
                for v in VENDOR_NAMES
                for i in range(1, args.payments + 1)
            ]
            payments[key] = payment_facts(drill.vendors, dag_id, intended)
    audit: dict[str, list[facts_mod.AuditFact]] = {}
    if drill.store_url:
        audit, summary = audit_facts(
            drill.store_url,
            drill.home.api_url,
            {k: DAGS[k][0] for k in drill.keys},
            spool_dir=drill.home.airflow_home / "crashsafe-spool",
        )
        progress(summary)
    alert = None
    if drill.receiver is not None:
        alert = alert_fact(
            drill.receiver,
            crashed_at=scenario.crashed_at,
            restarted_at=scenario.restarted_at,
            settings=f"poll every {args.watch_interval:g} s, threshold {_watch_threshold(args)} s, "
            f"default grace",
            wait_seconds=2 * args.watch_interval + 30,
        )
    work = None
    if drill.work is not None:
        reruns = {k: v for d in sides.values() if d is not None for k, v in rerun_starts(d).items()}
        work = WorkReport.build(drill.work, {k: DAGS[k][0] for k in drill.keys}, reruns).to_facts()
    progress("report")
    return facts_mod.DrillFacts(
        plain=sides["plain"],
        crashsafe=sides["crashsafe"],
        crashed_at=scenario.crashed_at,
        restarted_at=scenario.restarted_at,
        wall_seconds=progress.elapsed(),
        notes=drill.notes,
        sessions=sorted(drill.sessions),
        payments=payments,
        audit=audit,
        alert=alert,
        work=work,
    )
