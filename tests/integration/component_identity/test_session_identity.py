"""A real Airflow job process names its own metadata sessions; its forked children and PostgreSQL's cut agree.

The job process is Airflow's own start-up of a scheduler (``Job()``, ``SchedulerJobRunner``,
``prepare_for_execution``) on a real migrated metadata database, with the plugin loaded from its
entry point as in every Airflow component: nothing in the test names a session.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from airflow_crashsafe.component_identity.name import application_name, parse
from tests.integration.watchdog.wedging import airflow_env, psycopg

pytestmark = pytest.mark.integration

_JOB_PROCESS = textwrap.dedent(
    """
    import json, os, sys
    from sqlalchemy import text
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.utils.session import create_session

    NAME = "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"

    def own_name():
        with create_session() as session:
            return session.execute(text(NAME)).scalar()

    before = own_name()  # a pooled connection opened before the job exists
    job = Job()
    SchedulerJobRunner(job=job)
    job.prepare_for_execution()
    after = own_name()  # the same pooled connection, checked out again
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a forked worker: it inherits the engine, never the name
        os.write(write, json.dumps(own_name()).encode())
        os._exit(0)
    os.waitpid(child, 0)
    forked = json.loads(os.read(read, 4096))
    print(json.dumps({"job_id": job.id, "pid": os.getpid(), "host": job.hostname,
                      "before": before, "after": after, "child": forked}))
    """
)


def test_a_scheduler_job_names_its_sessions_and_its_forked_child_does_not(metadata_db: str) -> None:
    """Once the job has its id, its pooled session carries the scheduler identity; a forked child's never."""
    done = subprocess.run(
        [sys.executable, "-c", _JOB_PROCESS],
        env=airflow_env(metadata_db),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    expected = application_name("scheduler", seen["job_id"], seen["pid"], seen["host"])
    assert seen["after"] == expected
    identity = parse(seen["after"])
    assert identity is not None
    assert (identity.component, identity.job_id, identity.pid) == ("scheduler", seen["job_id"], seen["pid"])
    assert identity.host_matches(seen["host"])
    assert parse(seen["before"]) is None  # no identity before the job has one
    assert parse(seen["child"]) is None


def test_postgresql_cuts_a_long_identity_exactly_as_it_is_built(postgres_url: str) -> None:
    """A host too long for 63 bytes: what PostgreSQL stores is the built name, and it still parses."""
    host = "ip-10-20-30-40." + "x" * 70 + ".internal"
    name = application_name("scheduler", 123456, 4194304, host)
    with psycopg.connect(
        postgres_url, application_name=f"airflow-scheduler job=123456 pid=4194304 host={host}"
    ) as conn:
        stored = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()
    assert stored is not None
    assert stored[0] == name
    identity = parse(stored[0])
    assert identity is not None
    assert identity.truncated
    assert identity.host_matches(host)
    assert not identity.host_matches("ip-10-20-30-41." + "x" * 70)
