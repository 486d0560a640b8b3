"""The heal filter's proof (tables by oid, identity, timing), its pages, the canary's cause, the --heal flags.

No database: sessions are built as the watchdog reads them, and judged by the pure proof.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.component_identity.name import application_name
from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.health import JobRecord, Observation
from airflow_crashsafe.watchdog.pg_sessions import Relation
from airflow_crashsafe.watchdog.rules import Rules, evaluate
from airflow_crashsafe.watchdog.wedge import IdleTransaction, TableLock, prove_orphaned
from airflow_crashsafe.watchdog.wedge_alerts import stall_cause

NOW = datetime(2026, 12, 1, 3, 10, tzinfo=timezone.utc)
BEGAN = NOW - timedelta(minutes=5)
HOST = "sched-host"
RULES = Rules(expect_triggerer="no", expect_dag_processor="no")

#: Airflow's scheduler tables in the metadata schema, by oid; then look-alikes in other schemas.
POOL = TableLock(Relation(16400, "public", "slot_pool"), "RowShareLock")
TI_ROWS = TableLock(Relation(16410, "public", "task_instance"), "RowShareLock")
TI_WRITE = TableLock(Relation(16410, "public", "task_instance"), "RowExclusiveLock")
AIRFLOW = {16400, 16410, 16420}
APP_JOB = TableLock(Relation(24001, "app", "job"), "RowExclusiveLock")
ANALYTICS_JOB = TableLock(Relation(24002, "analytics", "job"), "RowShareLock")
JOB_POOL = TableLock(Relation(24003, "job", "slot_pool"), "RowShareLock")


def scheduler(job_id: int, started: datetime, beat: datetime, state: str = "running") -> JobRecord:
    return JobRecord("scheduler", beat, state=state, job_id=job_id, hostname=HOST, start_date=started)


DEAD = scheduler(1, BEGAN - timedelta(hours=2), BEGAN + timedelta(seconds=3), state="failed")
RESTARTED = scheduler(2, BEGAN + timedelta(seconds=45), NOW)
OLDER_REPLICA = scheduler(3, BEGAN - timedelta(minutes=1), NOW)
SCHEDULER_1 = application_name("scheduler", 1, 4242, HOST)


def session(
    application: str | None = SCHEDULER_1,
    locks: tuple[TableLock, ...] = (POOL, TI_ROWS),
    *,
    pid: int = 4242,
    opened: datetime = BEGAN - timedelta(hours=1),
    began: datetime = BEGAN,
    user: str = "airflow",
) -> IdleTransaction:
    return IdleTransaction(
        pid=pid,
        state="idle in transaction",
        backend_start=opened,
        xact_start=began,
        idle_since=began,
        db_now=NOW,
        locks=locks,
        database="airflow",
        user=user,
        application=application,
        client="10.0.0.7:51234",
    )


def judge(tx: IdleTransaction, schedulers: tuple[JobRecord, ...] = (RESTARTED, DEAD)) -> IdleTransaction:
    return prove_orphaned(tx, list(schedulers), NOW, 30, AIRFLOW)


def pages(*sessions: IdleTransaction, schedulers: tuple[JobRecord, ...] = (RESTARTED, DEAD)) -> list:  # type: ignore[type-arg]
    observation = Observation(at=NOW, source="db", jobs=schedulers, idle_transactions=sessions)
    return evaluate({}, observation, RULES)[1]


def test_the_dead_schedulers_own_session_is_proven() -> None:
    """Its identity names dead job 1 on its host, it locks Airflow's pool rows, its timing fits: proven."""
    judged = judge(session())
    assert judged.owner == DEAD
    assert judged.live == (RESTARTED,)
    assert "scheduler job 1 on sched-host (pid 4242)" in judged.verdict
    [page] = pages(judged)
    assert page.dedup_key.split(":")[2:4] == ["scheduler_wedged", "4242"]
    assert page.severity == "critical"


def test_transaction_begun_long_after_the_last_heartbeat_is_still_the_dead_schedulers() -> None:
    """A loop slowed by load: the last transaction began 40 s after the last heartbeat; still proven."""
    slow = scheduler(1, BEGAN - timedelta(hours=2), BEGAN - timedelta(seconds=40), state="failed")
    judged = prove_orphaned(session(), [RESTARTED, slow], NOW, 10, AIRFLOW)
    assert judged.owner == slow


def test_a_host_cut_at_postgresqls_limit_is_compared_by_what_survived() -> None:
    """A 63-byte name keeps the host's beginning: it matches that host, and not another one."""
    long_host = "ip-10-20-30-40.eu-west-1.compute.internal.example.org"
    name = application_name("scheduler", 1, 4242, long_host)
    assert len(name.encode()) == 63
    dead = replace(DEAD, hostname=long_host)
    assert judge(session(name), (RESTARTED, dead)).owner == dead
    other = replace(DEAD, hostname="ip-10-20-99-99.eu-west-1.compute.internal.example.org")
    assert judge(session(name), (RESTARTED, other)).owner is None


BYSTANDERS = {
    # (session, schedulers, why it is not proven, what it pages: None or the severity)
    "analyst-psql on app.job": (
        session("analyst-psql", (APP_JOB,), user="analyst"),
        None,
        "no row lock on Airflow's scheduler tables",
        None,
    ),
    "analyst on analytics.job": (
        session("analyst", (ANALYTICS_JOB,), user="analyst"),
        None,
        "no row lock on Airflow's",
        None,
    ),
    "analyst on job.slot_pool": (
        session("analyst", (JOB_POOL,), user="analyst"),
        None,
        "no row lock on Airflow's",
        None,
    ),
    "a look-alike table, even named as the scheduler": (
        session(SCHEDULER_1, (JOB_POOL,)),
        None,
        "no row lock",
        None,
    ),
    "DBeaver writing task_instance across the restart": (
        session("DBeaver 24.1.0 - SQLEditor <airflow>", (TI_WRITE,), user="alice"),
        None,
        "not an Airflow scheduler's identity",
        "warning",
    ),
    "psql holding the pool rows": (
        session("psql", (POOL,), user="bob"),
        None,
        "not an Airflow scheduler",
        "critical",
    ),
    "no application name (an api-server)": (session(None), None, "not an Airflow scheduler", "critical"),
    "the triggerer": (session(application_name("triggerer", 1, 4242, HOST)), None, "triggerer", "critical"),
    "the dag-processor": (
        session(application_name("dag-processor", 1, 4242, HOST)),
        None,
        "dag-processor",
        "critical",
    ),
    "the restarted scheduler": (
        session(application_name("scheduler", 2, 99, HOST)),
        None,
        "own session",
        "critical",
    ),
    "an older live HA replica": (
        session(application_name("scheduler", 3, 77, HOST)),
        (OLDER_REPLICA, RESTARTED, DEAD),
        "own session",
        "critical",
    ),
    "another host's name": (
        session(application_name("scheduler", 1, 4242, "laptop")),
        None,
        "names host",
        "critical",
    ),
    "a job that is no scheduler": (
        session(application_name("scheduler", 99, 4242, HOST)),
        None,
        "no scheduler in the job table",
        "critical",
    ),
    "opened before the dead job started": (
        session(opened=BEGAN - timedelta(hours=3)),
        None,
        "outside the time",
        "critical",
    ),
    "begun before the dead job started": (
        session(began=DEAD.start_date - timedelta(seconds=5), opened=DEAD.start_date - timedelta(seconds=10)),  # type: ignore[operator]
        None,
        "began before scheduler job 1 started",
        "critical",
    ),
    "a live replica older than the transaction": (
        session(),
        (OLDER_REPLICA, RESTARTED, DEAD),
        "may own it",
        "critical",
    ),
    "no live scheduler (nothing restarted yet)": (session(), (DEAD,), "no live scheduler", None),
}


@pytest.mark.parametrize("case", list(BYSTANDERS), ids=list(BYSTANDERS))
def test_a_bystander_is_never_proven_and_never_a_wedge(case: str) -> None:
    """Other schemas, people, other components, live replicas, wrong host or timing: never a wedge."""
    tx, schedulers, why, severity = BYSTANDERS[case]
    schedulers = schedulers or (RESTARTED, DEAD)
    judged = judge(tx, schedulers)
    assert judged.owner is None
    assert not judged.orphaned
    assert why in judged.verdict
    raised = pages(judged, schedulers=schedulers)
    kinds = [(a.dedup_key.split(":")[2], a.severity) for a in raised if "lock_holder" in a.dedup_key]
    assert not [a for a in raised if "scheduler_wedged" in a.dedup_key]
    assert kinds == ([] if severity is None else [("scheduler_lock_holder", severity)])


def test_an_unproven_holder_page_names_it_says_why_and_gives_the_exact_sql() -> None:
    """The DBeaver session: who, how long, what it locks, why it stays, the guarded statement; no SQL text."""
    tx = judge(session("DBeaver 24.1.0 - SQLEditor <airflow>", (TI_WRITE,), pid=5151, user="alice"))
    [page] = pages(tx)
    assert page.dedup_key.split(":")[2:4] == ["scheduler_lock_holder", "5151"]
    assert "not terminated" in page.summary
    assert "open transaction" not in page.summary.lower()  # the drill's test for a wedge page
    details = page.details
    assert (details["user"], details["client"]) == ("alice", "10.0.0.7:51234")
    assert details["application_name"] == "DBeaver 24.1.0 - SQLEditor <airflow>"
    assert (details["idle_seconds"], details["transaction_age_seconds"]) == (300, 300)
    assert details["locks"] == ["public.task_instance RowExclusiveLock"]
    assert details["terminated"] is False
    assert "not an Airflow scheduler's identity" in details["why_not_terminated"]
    assert (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = 5151 "
        f"AND backend_start = '{tx.backend_start.isoformat()}' AND xact_start = '{BEGAN.isoformat()}';"
    ) in details["remedy"]
    assert "query" not in json.dumps(details).lower()


def test_an_ordinary_crash_with_an_analyst_on_another_schemas_job_pages_nothing() -> None:
    """Scheduler restarted, no wedge, an analyst idle on app.job: no page at all."""
    assert pages(judge(session("analyst-psql", (APP_JOB,), user="analyst"))) == []


def observation_with(*sessions: IdleTransaction, last_success: datetime | None = None) -> Observation:
    return Observation(
        at=NOW,
        source="db",
        jobs=(RESTARTED, DEAD),
        canary_checked=True,
        canary_last_success=last_success or NOW - timedelta(hours=2),
        idle_transactions=sessions,
    )


def test_canary_stall_says_it_is_a_wedge_and_the_wedge_pages_despite_grace() -> None:
    """Canary stalled with a proven wedge: its summary names the wedge; the wedge pages with grace 300."""
    rules = Rules(grace=300, canary_dag_id="canary", canary_max_age=600, expect_triggerer="no")
    incidents, alerts = evaluate({}, observation_with(judge(session())), rules)
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["scheduler_wedged"]
    stall = incidents["scheduling_stalled"]
    assert "wedged by a dead scheduler's open transaction, backend pid 4242" in stall.summary
    assert stall.details["cause"].startswith("wedge:")


def test_an_unproven_holder_pages_despite_grace() -> None:
    """The wedge threshold is its grace: an unproven holder pages in the poll that finds it."""
    rules = Rules(grace=300, expect_triggerer="no", expect_dag_processor="no")
    _, alerts = evaluate({}, observation_with(judge(session("psql", (POOL,)))), rules)
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["scheduler_lock_holder"]


@pytest.mark.parametrize(
    ("sessions", "cause"),
    [
        (None, "unknown"),
        ((), "not a wedge"),
        ((judge(session(), (DEAD, RESTARTED, scheduler(3, BEGAN, NOW))),), "suspect"),
    ],
)
def test_stall_cause_without_a_proven_wedge(sessions: tuple[IdleTransaction, ...] | None, cause: str) -> None:
    """Not watched, nothing held, or an unproven holder: the cause says which, the summary is generic."""
    observation = Observation(at=NOW, source="db", idle_transactions=sessions)
    text, suffix = stall_cause(observation)
    assert text.startswith(cause)
    assert suffix is None


def test_the_death_alert_lists_open_transactions_without_their_sql() -> None:
    """No live scheduler: scheduler_dead lists who holds what (tables, modes), never query text."""
    tx = judge(session(), (DEAD,))
    [page] = pages(tx, schedulers=(DEAD,))
    assert page.dedup_key.split(":")[2] == "scheduler_dead"
    [listed] = page.details["open_transactions"]
    assert listed["locks"] == ["public.slot_pool RowShareLock", "public.task_instance RowShareLock"]
    assert not [key for key in listed if "query" in key]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--heal"], "--heal reads and ends metadata-DB sessions"),
        (["--heal", "--db-url", "sqlite:////tmp/airflow.db"], "needs a PostgreSQL metadata database"),
        (["--db-url", "postgresql://a@localhost/x", "--wedge-threshold", "0"], "--wedge-threshold"),
    ],
)
def test_heal_flag_mistakes_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """--heal without a PostgreSQL --db-url, or a zero wedge threshold, is a configuration error."""
    assert cli.run(parse(*argv, "--state-dir", str(tmp_path), "--once")) == 2
    assert needle in capsys.readouterr().err


def test_heal_and_wedge_threshold_from_the_config_file(tmp_path: Path) -> None:
    """[watch] heal / wedge_threshold are read from the file; flags still win."""
    path = tmp_path / "watch.toml"
    path.write_text("[watch]\nheal = true\nwedge_threshold = 90\n")
    merged, _ = cli.settings(parse("--config", str(path)))
    assert (merged["heal"], merged["wedge_threshold"]) == (True, 90.0)
    merged, _ = cli.settings(parse("--config", str(path), "--wedge-threshold", "30"))
    assert merged["wedge_threshold"] == 30.0
    assert cli.settings(parse())[0]["heal"] is False


def test_locks_on_look_alike_tables_are_never_considered_not_even_for_severity() -> None:
    """A session on job.slot_pool and public.task_instance: only the latter is named, and it is a warning."""
    tx = judge(session("psql", (JOB_POOL, TI_WRITE), user="bob"))
    assert tx.locks == (TI_WRITE,)
    [page] = pages(tx)
    assert page.severity == "warning"
    assert page.details["locks"] == ["public.task_instance RowExclusiveLock"]
