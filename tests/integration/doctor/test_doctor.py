"""`airflow-crashsafe doctor` against a real PostgreSQL metadata DB, with and without each hazard."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.cli.main import main
from airflow_crashsafe.component_identity.name import application_name
from airflow_crashsafe.doctor.findings import ERROR, HAZARD, OK, SKIPPED
from airflow_crashsafe.doctor.metadata import check_idle_transaction_timeout, check_triggerer_for_adoption
from airflow_crashsafe.doctor.session_identity import check_scheduler_session_identity
from airflow_crashsafe.doctor.store_conn import check_store_connection

pytestmark = pytest.mark.integration
psycopg = pytest.importorskip("psycopg")

JOB_DDL = """CREATE TABLE job (id SERIAL PRIMARY KEY, dag_id VARCHAR(250), state VARCHAR(20),
    job_type VARCHAR(30), start_date TIMESTAMPTZ, end_date TIMESTAMPTZ, latest_heartbeat TIMESTAMPTZ,
    executor_class VARCHAR(500), hostname VARCHAR(500), unixname VARCHAR(1000))"""


@pytest.fixture
def metadata(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Airflow configured on a fresh PostgreSQL metadata DB with a job table; yields ``run(sql)``."""
    monkeypatch.setenv(
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", postgres_url.replace("postgresql://", "postgresql+psycopg2://")
    )
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(JOB_DDL)

        def run(statement: str) -> None:
            conn.execute(statement)

        yield run


def set_timeout(postgres_url: str, value: str) -> None:
    name = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET idle_in_transaction_session_timeout = '{value}'")


def test_idle_transaction_timeout_off_is_a_hazard_and_set_is_ok(
    metadata: Callable[[str], None], postgres_url: str
) -> None:
    """PostgreSQL's default (0) is a hazard with the ALTER DATABASE fix; '5min' is fine."""
    [finding] = check_idle_transaction_timeout()
    assert finding.status == HAZARD
    assert "idle_in_transaction_session_timeout = '5min'" in finding.fix
    set_timeout(postgres_url, "5min")
    [finding] = check_idle_transaction_timeout()
    assert finding.status == OK
    assert finding.details["idle_in_transaction_session_timeout_ms"] == 300_000


def test_adoption_needs_a_live_triggerer(
    metadata: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No triggerer, or a stale one, is a hazard while adoption is on; a live one or adoption off is not."""
    [finding] = check_triggerer_for_adoption()
    assert finding.status == HAZARD
    assert "never run" in finding.summary
    metadata(
        "INSERT INTO job (job_type, state, latest_heartbeat, hostname) "
        "VALUES ('TriggererJob', 'running', now() - interval '5 minutes', 't1')"
    )
    [finding] = check_triggerer_for_adoption()
    assert finding.status == HAZARD
    assert "stopped heartbeating" in finding.summary
    metadata("UPDATE job SET latest_heartbeat = now()")
    assert check_triggerer_for_adoption()[0].status == OK
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ADOPT_IN_FLIGHT", "False")
    from airflow_crashsafe import config

    config.reset_cache()
    metadata("DELETE FROM job")
    assert check_triggerer_for_adoption()[0].status == SKIPPED


def live_scheduler(postgres_url: str, host: str = "sched-1") -> int:
    """A scheduler job row running with a fresh heartbeat; its id."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO job (job_type, state, start_date, latest_heartbeat, hostname) "
            "VALUES ('SchedulerJob', 'running', now(), now(), %s) RETURNING id",
            (host,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_scheduler_session_identity_is_checked_while_a_scheduler_runs(
    metadata: Callable[[str], None], postgres_url: str
) -> None:
    """No live scheduler: cannot tell. Live but unnamed sessions: a hazard with the fix. Named: ok."""
    [finding] = check_scheduler_session_identity()
    assert finding.status == ERROR
    assert "cannot tell" in finding.summary
    job = live_scheduler(postgres_url)
    with psycopg.connect(postgres_url, application_name="airflow scheduler"):  # not the identity
        [finding] = check_scheduler_session_identity()
    assert finding.status == HAZARD
    assert f"job {job} on sched-1" in finding.summary
    assert "install airflow-crashsafe in the scheduler's environment" in finding.fix
    assert finding.details["application_names"].get("airflow scheduler") == 1
    wrong_host = application_name("scheduler", job, 4242, "elsewhere")
    with psycopg.connect(postgres_url, application_name=wrong_host):
        assert check_scheduler_session_identity()[0].status == HAZARD
    with psycopg.connect(postgres_url, application_name=application_name("scheduler", job, 4242, "sched-1")):
        [finding] = check_scheduler_session_identity()
    assert finding.status == OK


@pytest.mark.parametrize(
    ("executor", "defined", "status"),
    [
        ("LocalExecutor", False, OK),
        ("CeleryExecutor", False, HAZARD),
        ("CeleryExecutor", True, OK),
        ("CeleryExecutor", "unreachable", HAZARD),
        ("CeleryExecutor", "sqlite", HAZARD),
        ("LocalExecutor", "sqlite", OK),
    ],
)
def test_store_connection_must_be_shared_on_several_hosts(
    postgres_url: str,
    airflow_conn: Callable[[str, str], str],
    monkeypatch: pytest.MonkeyPatch,
    executor: str,
    defined: bool | str,
    status: str,
    tmp_path: Path,
) -> None:
    """No store connection is fine on one host only; a defined one must open from here."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    if defined == "sqlite":
        airflow_conn("crashsafe_default", f"sqlite:///{tmp_path}/store.db")
    elif defined == "unreachable":
        airflow_conn("crashsafe_default", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2")
    elif defined:
        airflow_conn("crashsafe_default", postgres_url)
    [finding] = check_store_connection()
    assert finding.status == status, finding.summary
    if status == HAZARD:
        assert "AIRFLOW_CONN_CRASHSAFE_DEFAULT" in finding.fix or "opens from every host" in finding.fix


def test_doctor_exits_0_on_a_safe_deployment_and_1_naming_the_hazard(
    metadata: Callable[[str], None],
    postgres_url: str,
    airflow_conn: Callable[[str, str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """All safe: exit 0. The timeout back to 0: exit 1 and the JSON names only that hazard."""
    airflow_conn("crashsafe_default", postgres_url)
    metadata(
        "INSERT INTO job (job_type, state, latest_heartbeat, hostname) "
        "VALUES ('TriggererJob', 'running', now(), 't')"
    )
    job = live_scheduler(postgres_url)
    set_timeout(postgres_url, "5min")
    with psycopg.connect(postgres_url, application_name=application_name("scheduler", job, 7, "sched-1")):
        assert main(["doctor"]) == 0, capsys.readouterr().out
        assert capsys.readouterr().out.rstrip().endswith("no hazard found")
        set_timeout(postgres_url, "0")
        assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["check"] for f in report["findings"] if f["status"] == HAZARD] == [
        "metadata_idle_transaction_timeout"
    ]
