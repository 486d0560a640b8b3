"""`watch --once --heal` on a night with bystanders: only the dead scheduler's session is ended.

Airflow's real metadata schema; scheduler job 1 is Airflow's own start-up (its row and its
session's name come from Airflow and the plugin), SIGKILLed inside its critical section; job 2
starts after. Meanwhile an analyst holds transactions on look-alike tables of other schemas
(``app.job``, ``analytics.job``, ``job.slot_pool``) and a SQL client in manual-commit mode holds a
write lock on ``public.task_instance``, all begun while job 1 ran and kept across the restart —
the sessions a proof by timing alone terminated. The watchdog is the real CLI process, paging a
local webhook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from airflow_crashsafe.watchdog.wedge import CLOCK_MARGIN
from tests.integration.watchdog.wedging import WedgeFactory, execute, psycopg
from tests.support.httpserver import Reply, Server, serve

pytestmark = pytest.mark.integration

HEARTBEAT = 2.0
IDLE = 1.0
#: A literal in the SQL client's statement: query text must never reach a page, the outbox or a log.
CANARY = "pw-Canary-7f3a9e"
DBEAVER = "DBeaver 24.1.0 - SQLEditor <airflow>"


@pytest.fixture
def analyst(metadata_db: str) -> Iterator[str]:
    """A login role of its own, owning look-alike tables in three other schemas; yields its URL."""
    role = f"analyst_{uuid.uuid4().hex[:8]}"
    execute(metadata_db, f"CREATE ROLE {role} LOGIN")
    for schema, table in (("app", "job"), ("analytics", "job"), ("job", "slot_pool")):
        execute(metadata_db, f"CREATE SCHEMA {schema} AUTHORIZATION {role}")
        execute(metadata_db, f"CREATE TABLE {schema}.{table} (id int PRIMARY KEY, note text)")
        execute(metadata_db, f"INSERT INTO {schema}.{table} VALUES (1, 'before')")
        execute(metadata_db, f"ALTER TABLE {schema}.{table} OWNER TO {role}")
    parts = urlsplit(metadata_db)
    try:
        yield urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
    finally:  # a session left open (a failed test) would keep DROP OWNED waiting
        execute(
            metadata_db, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        execute(metadata_db, f"DROP OWNED BY {role}")
        execute(metadata_db, f"DROP ROLE {role}")


def open_bystanders(
    sessions: dict[str, Any], metadata_db: str, analyst: str, *, with_sql_client: bool
) -> None:
    """Each bystander's connection into ``sessions``, idle in its open transaction (not autocommit)."""
    psql = sessions["app.job"] = psycopg.connect(analyst, application_name="analyst-psql")
    psql.execute("UPDATE app.job SET note = 'fixing' WHERE id = 1")
    other = sessions["analytics.job + job.slot_pool"] = psycopg.connect(analyst, application_name="analyst")
    other.execute("SELECT * FROM analytics.job FOR UPDATE").fetchall()
    other.execute("SELECT * FROM job.slot_pool FOR UPDATE").fetchall()
    if with_sql_client:
        client = sessions["public.task_instance"] = psycopg.connect(metadata_db, application_name=DBEAVER)
        client.execute(f"UPDATE task_instance SET hostname = '{CANARY}' WHERE task_id = 'no-such-task'")


def still_open(conn: Any) -> bool:
    """Whether its transaction is still open: a statement runs in a transaction begun before it."""
    try:
        began_before = conn.execute("SELECT now() < statement_timestamp()").fetchone()[0]  # now(): its begin
    except psycopg.OperationalError:
        return False
    return bool(began_before) and conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS


def session_exists(url: str, pid: int) -> bool:
    return bool(execute(url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)))


def restart(url: str, dead_job: int) -> int:
    """Job 2 starts after job 1 died; job 1 goes stale and is marked failed, as job 2's orphan check does."""
    time.sleep(CLOCK_MARGIN + 0.5)
    [(live,)] = execute(
        url,
        "INSERT INTO job (job_type, state, start_date, latest_heartbeat, hostname) "
        "VALUES ('SchedulerJob', 'running', now(), now(), 'sched-host-2') RETURNING id",
    )
    time.sleep(HEARTBEAT + 0.2)
    execute(url, "UPDATE job SET latest_heartbeat = now() WHERE id = %s", (live,))
    execute(url, "UPDATE job SET state = 'failed' WHERE id = %s", (dead_job,))
    return int(live)


def watch_once_heal(url: str, tmp_path: Path, webhook: Server) -> subprocess.CompletedProcess[str]:
    """`airflow-crashsafe watch --db-url-env … --once --heal`, as the real command line runs it."""
    config = tmp_path / "watch.json"
    sink = {"type": "webhook", "url": webhook.url + "/hook", "min_severity": "info"}
    config.write_text(
        json.dumps({"watch": {"expect_triggerer": "no", "expect_dag_processor": "no"}, "sinks": [sink]})
    )
    argv = [sys.executable, "-m", "airflow_crashsafe.watchdog.cli", "--db-url-env", "METADATA_URL", "--once"]
    argv += ["--heal", "--threshold", str(HEARTBEAT), "--wedge-threshold", str(IDLE)]
    argv += ["--config", str(config), "--state-dir", str(tmp_path / "state")]
    env = {**os.environ, "METADATA_URL": url}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def pages(webhook: Server) -> dict[str, dict[str, Any]]:
    """Trigger alerts the webhook got, by incident kind and backend pid (``scheduler_wedged:123``)."""
    found = {}
    for request in webhook.requests:
        body = request.json()
        if body["event"] == "trigger":
            found[":".join(body["dedup_key"].split(":")[2:4])] = body
    return found


def test_only_the_dead_schedulers_session_ends_and_the_unproven_one_is_paged(
    metadata_db: str, analyst: str, wedge_factory: WedgeFactory, tmp_path: Path
) -> None:
    """The wedge is ended; the analyst's and the SQL client's transactions stay open; the client is paged."""
    wedge = wedge_factory(metadata_db, airflow=True)
    assert wedge.job_id is not None
    bystanders: dict[str, Any] = {}
    try:
        open_bystanders(bystanders, metadata_db, analyst, with_sql_client=True)
        wedge.kill_owner()
        restart(metadata_db, wedge.job_id)
        with serve(lambda _r: Reply(200, {})) as webhook:
            done = watch_once_heal(metadata_db, tmp_path, webhook)
        assert done.returncode == 1, done.stderr[-3000:]

        assert not session_exists(metadata_db, wedge.backend_pid)
        for name, conn in bystanders.items():
            assert still_open(conn), f"the {name} session's transaction was ended"
        client_pid = bystanders["public.task_instance"].info.backend_pid

        found = pages(webhook)
        assert set(found) == {f"scheduler_wedged:{wedge.backend_pid}", f"scheduler_lock_holder:{client_pid}"}
        wedged = found[f"scheduler_wedged:{wedge.backend_pid}"]
        assert wedged["details"]["heal"]["result"] == "terminated"
        assert wedged["details"]["dead_scheduler"]["job_id"] == wedge.job_id
        assert wedged["details"]["identity"]["job_id"] == wedge.job_id
        assert "public.slot_pool RowShareLock" in wedged["details"]["locks"]

        held = found[f"scheduler_lock_holder:{client_pid}"]
        assert held["severity"] == "warning"
        details = held["details"]
        assert details["application_name"] == DBEAVER
        assert details["user"] == urlsplit(metadata_db).username
        assert details["client"]
        assert details["idle_seconds"] >= IDLE
        assert details["transaction_age_seconds"] >= HEARTBEAT
        assert details["locks"] == ["public.task_instance RowExclusiveLock"]
        assert details["terminated"] is False
        assert "not an Airflow scheduler's identity" in details["why_not_terminated"]
        assert f"FROM pg_stat_activity WHERE pid = {client_pid} AND backend_start = " in details["remedy"]

        shipped = [request.body.decode() for request in webhook.requests]
        shipped += [p.read_text() for p in (tmp_path / "state").rglob("*") if p.is_file()]
        shipped += [done.stdout, done.stderr]
        assert not [text for text in shipped if CANARY in text], (
            "query text reached a page, the state or a log"
        )
    finally:
        for conn in bystanders.values():
            conn.close()


def test_an_ordinary_crash_with_an_analyst_on_look_alike_tables_pages_and_ends_nothing(
    metadata_db: str, analyst: str, tmp_path: Path
) -> None:
    """No wedge: job 1 just dies, job 2 starts; the analyst's transactions on other schemas are untouched."""
    [(dead,)] = execute(
        metadata_db,
        "INSERT INTO job (job_type, state, start_date, latest_heartbeat, hostname) "
        "VALUES ('SchedulerJob', 'running', now() - interval '10 minutes', now(), 'sched-host') RETURNING id",
    )
    bystanders: dict[str, Any] = {}
    try:
        open_bystanders(bystanders, metadata_db, analyst, with_sql_client=False)
        restart(metadata_db, int(dead))
        with serve(lambda _r: Reply(200, {})) as webhook:
            done = watch_once_heal(metadata_db, tmp_path, webhook)
        assert done.returncode == 0, done.stderr[-3000:]
        assert webhook.requests == []
        for name, conn in bystanders.items():
            assert still_open(conn), f"the {name} session's transaction was ended"
    finally:
        for conn in bystanders.values():
            conn.close()
