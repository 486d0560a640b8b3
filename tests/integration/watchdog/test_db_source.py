"""``--db-url`` mode against real PostgreSQL and SQLite ``job`` tables shaped like Airflow's."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.db import DbSource
from airflow_crashsafe.watchdog.rules import Rules, evaluate

pytestmark = pytest.mark.integration

NOW = datetime.now(timezone.utc).replace(microsecond=0)

PG_DDL = [
    """CREATE TABLE job (id SERIAL PRIMARY KEY, dag_id VARCHAR(250), state VARCHAR(20),
       job_type VARCHAR(30), start_date TIMESTAMPTZ, end_date TIMESTAMPTZ, latest_heartbeat TIMESTAMPTZ,
       executor_class VARCHAR(500), hostname VARCHAR(500), unixname VARCHAR(1000))""",
    "CREATE INDEX job_type_heart ON job (job_type, latest_heartbeat)",
    "CREATE TABLE dag_run (id SERIAL PRIMARY KEY, dag_id VARCHAR(250), run_id VARCHAR(250),"
    " state VARCHAR(50), end_date TIMESTAMPTZ)",
]
SQLITE_DDL = [
    """CREATE TABLE job (id INTEGER PRIMARY KEY, dag_id VARCHAR(250), state VARCHAR(20),
       job_type VARCHAR(30), start_date DATETIME, end_date DATETIME, latest_heartbeat DATETIME,
       executor_class VARCHAR(500), hostname VARCHAR(500), unixname VARCHAR(1000))""",
]


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[str, Any]]:
    """(url, execute) for a fresh Airflow-shaped job table in PostgreSQL or SQLite."""
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
        conn = sqlite3.connect(url.split("://", 1)[1][1:])

        def execute_sqlite(sql: str, params: tuple[Any, ...] = ()) -> None:
            # Airflow's UtcDateTime stores naive UTC text in SQLite.
            conn.execute(
                sql.replace("%s", "?"),
                tuple(
                    p.astimezone(timezone.utc).replace(tzinfo=None).isoformat(" ")
                    if isinstance(p, datetime)
                    else p
                    for p in params
                ),
            )
            conn.commit()

        for ddl in SQLITE_DDL:
            execute_sqlite(ddl)
        yield url, execute_sqlite
        conn.close()
        return
    psycopg = pytest.importorskip("psycopg")
    url = request.getfixturevalue("postgres_url")  # a fresh database per test (tests/conftest.py)
    with psycopg.connect(url, autocommit=True) as conn:

        def execute_pg(sql: str, params: tuple[Any, ...] = ()) -> None:
            conn.execute(sql, params)

        for ddl in PG_DDL:
            execute_pg(ddl)
        yield url, execute_pg


def add_job(execute: Any, job_type: str, state: str, age: float, host: str = "h") -> None:
    execute(
        "INSERT INTO job (job_type, state, latest_heartbeat, hostname, start_date)"
        " VALUES (%s, %s, %s, %s, %s)",
        (job_type, state, NOW - timedelta(seconds=age), host, NOW - timedelta(hours=1)),
    )


def test_live_scheduler_is_seen_alive(db: tuple[str, Any]) -> None:
    """A running row with a fresh heartbeat: no condition at all."""
    url, execute = db
    add_job(execute, "SchedulerJob", "running", 2)
    observation = DbSource(url).observe(NOW)
    assert observation.ok, observation.error
    incidents, alerts = evaluate({}, observation, Rules(grace=0))
    assert incidents == {}
    assert alerts == []


def test_sigkilled_scheduler_row_still_running_is_dead(db: tuple[str, Any]) -> None:
    """The SIGKILL shape: state running, heartbeat 45 s old — and an older graceful stop — pages."""
    url, execute = db
    add_job(execute, "SchedulerJob", "success", 4000)
    add_job(execute, "SchedulerJob", "running", 45, host="killed")
    _, alerts = evaluate({}, DbSource(url).observe(NOW), Rules(grace=0))
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["scheduler_dead"]
    assert alerts[0].details["schedulers"][0]["hostname"] == "killed"
    assert alerts[0].began_at == NOW - timedelta(seconds=45)


def test_ha_dead_replica_is_a_warning(db: tuple[str, Any]) -> None:
    """Two running rows, one stale: a warning for that replica, no page."""
    url, execute = db
    add_job(execute, "SchedulerJob", "running", 1, host="a")
    add_job(execute, "SchedulerJob", "running", 120, host="b")
    _, alerts = evaluate({}, DbSource(url).observe(NOW), Rules(grace=0))
    assert [(a.severity, a.details["replica"]["hostname"]) for a in alerts] == [("warning", "b")]


def test_gracefully_stopped_dag_processor_is_dead_when_expected(db: tuple[str, Any]) -> None:
    """A dag-processor whose only row is `success` counts as dead (auto: one has run)."""
    url, execute = db
    add_job(execute, "SchedulerJob", "running", 1)
    add_job(execute, "DagProcessorJob", "success", 5)
    _, alerts = evaluate({}, DbSource(url).observe(NOW), Rules(grace=0))
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["dag_processor_dead"]


def test_missing_job_table_is_an_alert_not_a_pass(db: tuple[str, Any]) -> None:
    """A DB without Airflow's tables (wrong database) raises db_unreachable naming the problem."""
    url, execute = db
    execute("DROP TABLE job")
    observation = DbSource(url).observe(NOW)
    assert observation.error
    assert "cannot read the job table" in observation.error
    _, alerts = evaluate({}, observation, Rules(grace=0))
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["db_unreachable"]


def test_canary_staleness_from_dag_run(postgres_url: str) -> None:
    """Scheduler alive but the canary's newest success is too old: scheduling_stalled."""
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for ddl in PG_DDL:
            conn.execute(ddl)
        conn.execute(
            "INSERT INTO job (job_type, state, latest_heartbeat) VALUES ('SchedulerJob', 'running', %s)",
            (NOW,),
        )
        conn.execute(
            "INSERT INTO dag_run (dag_id, state, end_date) VALUES ('canary', 'success', %s)",
            (NOW - timedelta(seconds=900),),
        )
    observation = DbSource(postgres_url, canary_dag_id="canary").observe(NOW)
    rules = Rules(grace=0, canary_dag_id="canary", canary_max_age=600)
    _, alerts = evaluate({}, observation, rules)
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["scheduling_stalled"]
    assert observation.running_tasks is None
    assert "running tasks unavailable" in observation.notes[0]
    _, alerts = evaluate({}, observation, Rules(grace=0, canary_dag_id="canary", canary_max_age=1200))
    assert alerts == []


def test_wrong_sqlite_path_is_an_error_and_bad_scheme_is_config_error(tmp_path: Any) -> None:
    """A missing SQLite file is not silently created; an unknown scheme is a ConfigurationError."""
    observation = DbSource(f"sqlite:///{tmp_path}/nope.db").observe(NOW)
    assert observation.error
    assert not (tmp_path / "nope.db").exists()
    with pytest.raises(ConfigurationError, match="--db-url must be"):
        DbSource("mysql://x/y")


@pytest.mark.parametrize("who", ["no_grant", "unknown_role"])
def test_refused_db_login_or_grant_is_a_blind_spot_alert(postgres_url: str, who: str) -> None:
    """A DB user without SELECT on job, or one that does not exist, pages "monitoring blind spot"."""
    psycopg = pytest.importorskip("psycopg")
    from urllib.parse import urlsplit, urlunsplit

    role = f"crashsafe_wd_{who}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for ddl in PG_DDL:
            conn.execute(ddl)
        if who == "no_grant":
            conn.execute(f"DROP ROLE IF EXISTS {role}")
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    parts = urlsplit(postgres_url)
    netloc = f"{role}:pw@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    try:
        observation = DbSource(url).observe(NOW)
    finally:
        if who == "no_grant":
            with psycopg.connect(postgres_url, autocommit=True) as conn:
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")
    assert "db" in observation.blind_spots, observation.error
    assert "pw" not in observation.blind_spots["db"]
    _, alerts = evaluate({}, observation, Rules(grace=0))
    assert [(a.dedup_key.split(":")[2], a.severity) for a in alerts] == [("blind_spot", "critical")]
    assert alerts[0].summary.startswith("monitoring blind spot: metadata database")
