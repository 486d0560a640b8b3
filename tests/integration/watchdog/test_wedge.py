"""A dead scheduler's open transaction, on Airflow's real metadata schema: paged, healed, never confused.

Each test crashes a scheduler-like process inside its critical section (see ``wedging.py``), its
session named as the plugin names a scheduler's, then records a restarted scheduler in the
``job`` table, and asks the watchdog what it sees.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from airflow_crashsafe.component_identity.name import application_name
from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.db import DbSource
from airflow_crashsafe.watchdog.health import Observation
from airflow_crashsafe.watchdog.rules import Rules, evaluate
from airflow_crashsafe.watchdog.wedge import CLOCK_MARGIN, WedgeWatch
from tests.integration.watchdog.wedging import POOL_LOCK, Wedge, WedgeFactory, execute, psycopg

pytestmark = pytest.mark.integration

#: Small thresholds so that a test waits seconds, not minutes: heartbeat age that means dead,
#: and how long a session must sit idle in its transaction.
HEARTBEAT = 2.0
IDLE = 1.0
RULES = Rules(threshold=HEARTBEAT, grace=30, expect_triggerer="no", expect_dag_processor="no")


def add_scheduler(url: str, host: str, started_ago: float = 0.0) -> int:
    rows = execute(
        url,
        "INSERT INTO job (job_type, state, start_date, latest_heartbeat, hostname) "
        "VALUES ('SchedulerJob', 'running', now() - make_interval(secs => %s), now(), %s) RETURNING id",
        (started_ago, host),
    )
    return int(rows[0][0])


def beat(url: str, job_id: int) -> None:
    execute(url, "UPDATE job SET latest_heartbeat = now() WHERE id = %s", (job_id,))


def session_exists(url: str, pid: int) -> bool:
    return bool(execute(url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)))


def scheduler_can_lock_pools(url: str) -> bool:
    """Whether a scheduler's critical section can start now (it fails at once when it cannot)."""
    with psycopg.connect(url) as conn:
        try:
            conn.execute(POOL_LOCK).fetchall()
            return True
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            conn.rollback()


def observe(url: str, *, heal: bool = False) -> Observation:
    watch = WedgeWatch(idle_threshold=IDLE, heartbeat_threshold=HEARTBEAT, heal=heal)
    return DbSource(url, wedge=watch).observe(datetime.now(timezone.utc))


def scheduler_identity(job_id: int, host: str) -> str:
    """The name the plugin gives a scheduler's sessions, with ``{pid}`` for the wedging process's pid."""
    return application_name("scheduler", job_id, 1, host).replace("pid=1 ", "pid={pid} ")


def crash_and_restart(url: str, start: WedgeFactory, *, named: bool = True) -> tuple[Wedge, int]:
    """The incident: the scheduler dies holding the pool locks; another starts; time passes.

    ``named``: its session carries its identity (False: a scheduler without the plugin).
    """
    old = add_scheduler(url, "old-scheduler", started_ago=600)
    wedge = start(url, scheduler_identity(old, "old-scheduler") if named else "")
    wedge.kill_owner()
    time.sleep(CLOCK_MARGIN + 0.5)
    live = add_scheduler(url, "new-scheduler")
    time.sleep(HEARTBEAT + 0.2)  # the dead one's heartbeat is stale; the session idle past IDLE
    beat(url, live)
    return wedge, live


def test_orphaned_transaction_pages_with_pid_age_locks_and_the_remedy(
    metadata_db: str, wedge_factory: WedgeFactory
) -> None:
    """Without --heal: one critical page naming the backend, its age and locks, and the exact fix."""
    wedge, _ = crash_and_restart(metadata_db, wedge_factory)
    assert not scheduler_can_lock_pools(metadata_db)  # the restarted scheduler queues nothing

    _, alerts = evaluate({}, observe(metadata_db), RULES)

    assert [(a.event, a.severity, a.dedup_key.split(":")[2]) for a in alerts] == [
        ("trigger", "critical", "scheduler_wedged")
    ]
    alert = alerts[0]
    assert alert.summary.startswith("Restarted scheduler blocked by a dead scheduler's open transaction")
    assert f"backend pid {wedge.backend_pid}" in alert.summary
    details = alert.details
    assert details["backend_pid"] == wedge.backend_pid
    assert details["idle_seconds"] >= IDLE
    assert details["transaction_age_seconds"] >= IDLE
    assert {"public.slot_pool RowShareLock", "public.task_instance RowShareLock"} <= set(details["locks"])
    assert details["identity"]["component"] == "scheduler"
    assert details["identity"]["job_id"] == details["dead_scheduler"]["job_id"]
    assert details["dead_scheduler"]["hostname"] == "old-scheduler"
    assert details["live_schedulers"][0]["hostname"] == "new-scheduler"
    assert f"SELECT pg_terminate_backend({wedge.backend_pid})" in details["remedy"]
    assert "idle_in_transaction_session_timeout" in details["remedy"]
    assert details["heal"].startswith("off")
    assert session_exists(metadata_db, wedge.backend_pid)  # paged, not touched


def test_heal_terminates_the_orphan_and_the_resolve_says_so(
    metadata_db: str, wedge_factory: WedgeFactory
) -> None:
    """With --heal: the backend is terminated in the poll that finds it; scheduling can resume."""
    wedge, live = crash_and_restart(metadata_db, wedge_factory)
    # The restarted scheduler's orphan check marks its predecessor failed; still provably dead.
    execute(metadata_db, "UPDATE job SET state = 'failed' WHERE hostname = 'old-scheduler'")

    incidents, alerts = evaluate({}, observe(metadata_db, heal=True), RULES)

    [page] = alerts
    assert page.details["heal"]["result"] == "terminated"
    assert page.details["heal"]["action"] == f"SELECT pg_terminate_backend({wedge.backend_pid})"
    assert page.summary.endswith("terminated by the watchdog (--heal)")
    assert not session_exists(metadata_db, wedge.backend_pid)
    assert scheduler_can_lock_pools(metadata_db)

    beat(metadata_db, live)
    incidents, alerts = evaluate(incidents, observe(metadata_db, heal=True), RULES)
    [resolve] = alerts
    assert resolve.event == "resolve"
    assert resolve.summary.startswith("recovered: Restarted scheduler blocked")
    assert resolve.details["heal"]["result"] == "terminated"
    assert incidents == {}


def test_a_wedge_without_the_identity_is_paged_for_a_person_never_ended(
    metadata_db: str, wedge_factory: WedgeFactory
) -> None:
    """A scheduler without the plugin wedges: timing fits, --heal ends nothing, a critical page says why."""
    wedge, _ = crash_and_restart(metadata_db, wedge_factory, named=False)
    _, alerts = evaluate({}, observe(metadata_db, heal=True), RULES)
    [page] = alerts
    assert page.dedup_key.split(":")[2:4] == ["scheduler_lock_holder", str(wedge.backend_pid)]
    assert page.severity == "critical"
    assert "not an Airflow scheduler's identity" in page.details["why_not_terminated"]
    assert f"WHERE pid = {wedge.backend_pid} AND backend_start = " in page.details["remedy"]
    assert session_exists(metadata_db, wedge.backend_pid)
    assert not scheduler_can_lock_pools(metadata_db)


def test_live_scheduler_sessions_and_ordinary_sessions_are_never_touched(
    metadata_db: str,
) -> None:
    """--heal ends none of: a live scheduler's long transaction (paged for a person), its short one,
    a reader, a writer of a non-scheduler table (neither reported)."""
    add_scheduler(metadata_db, "old-scheduler", started_ago=600)
    reader = psycopg.connect(metadata_db)  # idle in transaction, AccessShareLock on task_instance
    reader.execute("SELECT count(*) FROM task_instance").fetchall()
    writer = psycopg.connect(metadata_db)  # idle in transaction, row locks on a non-scheduler table
    writer.execute("INSERT INTO log (dttm, event) VALUES (now(), 'ordinary')")
    time.sleep(CLOCK_MARGIN + 0.5)
    live = add_scheduler(metadata_db, "new-scheduler")
    # the live scheduler's own transaction, left idle for long
    own = psycopg.connect(
        metadata_db, application_name=application_name("scheduler", live, 77, "new-scheduler")
    )
    own.execute(POOL_LOCK).fetchall()
    others = [reader, writer, own]
    try:
        time.sleep(HEARTBEAT + 0.2)
        beat(metadata_db, live)
        observation = observe(metadata_db, heal=True)
        _, alerts = evaluate({}, observation, RULES)
        [seen] = observation.idle_transactions or ()
        assert seen.pid == own.info.backend_pid
        assert not seen.orphaned
        assert seen.heal is None
        assert f"live scheduler job {live}'s own session" in seen.verdict
        [page] = alerts
        assert page.dedup_key.split(":")[2:4] == ["scheduler_lock_holder", str(seen.pid)]
        assert page.details["terminated"] is False
        own.rollback()

        short = psycopg.connect(metadata_db)  # a live scheduler's ordinary, short critical section
        others.append(short)
        short.execute(POOL_LOCK).fetchall()
        observation = observe(metadata_db, heal=True)
        assert observation.idle_transactions == ()
        short.commit()
        for conn in others:
            assert session_exists(metadata_db, conn.info.backend_pid)
        reader.rollback()
        writer.rollback()
    finally:
        for conn in others:
            conn.close()


def _as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))


def test_heal_refused_is_an_alert_detail_and_hidden_sessions_a_note(
    metadata_db: str, wedge_factory: WedgeFactory
) -> None:
    """A role that may not see or end the session: a note, then a 'refused' heal with its fix — no crash."""
    role = f"watcher_{int(time.time() * 1000) % 10**8}"
    execute(metadata_db, f"CREATE ROLE {role} LOGIN")
    execute(metadata_db, f"GRANT SELECT ON job, dag_run, task_instance TO {role}")
    try:
        wedge, _ = crash_and_restart(metadata_db, wedge_factory)
        watcher = _as_role(metadata_db, role)

        blind = observe(watcher, heal=True)
        assert blind.idle_transactions == ()
        assert any(f"GRANT pg_read_all_stats TO {role}" in note for note in blind.notes)

        execute(metadata_db, f"GRANT pg_read_all_stats TO {role}")
        _, alerts = evaluate({}, observe(watcher, heal=True), RULES)
        [page] = alerts
        assert page.details["heal"]["result"] == "refused"
        assert f"GRANT pg_signal_backend TO {role}" in page.details["heal"]["fix"]
        assert "--heal refused" in page.summary
        assert session_exists(metadata_db, wedge.backend_pid)
    finally:
        execute(metadata_db, f"DROP OWNED BY {role}")
        execute(metadata_db, f"DROP ROLE {role}")


def test_watch_once_heal_from_the_command_line(
    metadata_db: str, wedge_factory: WedgeFactory, tmp_path: Path
) -> None:
    """`watch --once --db-url ... --heal` pages the wedge (exit 1) and has ended the session."""
    wedge, _ = crash_and_restart(metadata_db, wedge_factory)
    argv = ["--db-url", metadata_db, "--threshold", str(HEARTBEAT), "--wedge-threshold", str(IDLE)]
    argv += ["--heal", "--once", "--state-dir", str(tmp_path), "--expect-triggerer", "no"]
    assert cli.main([*argv, "--expect-dag-processor", "no"]) == 1
    assert not session_exists(metadata_db, wedge.backend_pid)
