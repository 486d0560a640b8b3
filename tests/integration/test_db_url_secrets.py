"""Against real PostgreSQL: a password in the metadata-DB or store URL, in any libpq form, reaches no
page, finding, error or CLI output when the database refuses or cannot be parsed."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from airflow_crashsafe.errors import StoreError
from airflow_crashsafe.store.store import open_store, reset_store_cache
from airflow_crashsafe.watchdog.db import DbSource
from airflow_crashsafe.watchdog.rules import Rules, evaluate

pytestmark = pytest.mark.integration

SECRET = "Hunter2Secret"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def locked_role(postgres_server_url: str) -> Iterator[str]:
    """A role with a password that may not log in (as a revoked service account): its name."""
    import psycopg

    name = f"crashsafe_locked_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} NOLOGIN PASSWORD '{SECRET}'")
    yield name
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {name}")


def _forms(server_url: str, user: str, database: str) -> list[str]:
    """The same address with the password in each place libpq takes it."""
    parts = urlsplit(server_url)
    host = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    return [
        urlunsplit(("postgresql", f"{user}:{SECRET}@{host}", f"/{database}", "", "")),
        urlunsplit(("postgres", f"{user}@{host}", f"/{database}", f"password={SECRET}", "")),
        urlunsplit(
            (
                "postgresql+psycopg2",
                f"{user}@{host}",
                f"/{database}",
                f"sslmode=disable&password={SECRET}",
                "",
            )
        ),
        urlunsplit(("postgresql", f"{user}:{SECRET}%zz@{host}", f"/{database}", "", "")),
    ]


def test_a_refused_watchdog_role_pages_without_the_password(
    postgres_server_url: str, locked_role: str
) -> None:
    """The server refuses the role (a blind-spot page) or the URL does not parse (db_unreachable):
    the page, the incident and the observation name the database with its password masked."""
    for url in _forms(postgres_server_url, locked_role, "postgres"):
        source = DbSource(url, timeout=5)
        observation = source.observe(datetime.now(timezone.utc))
        assert observation.error, url
        incidents, alerts = evaluate({}, observation, Rules(grace=0))
        assert {"db_unreachable", "blind_spot:db"} & set(incidents)  # a refused login is a blind spot
        shown = [observation.error, *observation.blind_spots.values(), *(repr(a) for a in alerts)]
        shown += [repr(incident) for incident in incidents.values()]
        assert not [text for text in shown if SECRET in text], url
    assert "is not permitted to log in" in observation.error or "percent-encoded" in observation.error


def test_store_and_doctor_errors_carry_no_password(
    postgres_server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store URL or a metadata URL naming a database that does not exist: the StoreError, its
    cause chain and the doctor's finding say so without the password."""
    from airflow_crashsafe.doctor.metadata import check_idle_transaction_timeout

    for url in _forms(postgres_server_url, "postgres", f"missing_{uuid.uuid4().hex[:8]}"):
        reset_store_cache()
        with pytest.raises(StoreError) as raised:
            open_store(url).migrate()
        chain = [raised.value, raised.value.__cause__, raised.value.__context__]
        assert not [str(e) for e in chain if e is not None and SECRET in str(e)], url
        assert SECRET not in open_store(url).location
        monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", url)
        [finding] = check_idle_transaction_timeout()
        assert finding.status == "error"
        assert SECRET not in repr(finding), url
    reset_store_cache()


def test_db_migrate_prints_no_password(postgres_server_url: str, tmp_path: Path) -> None:
    """`airflow-crashsafe db migrate` with a store connection it cannot open: exit 2, password masked."""
    for url in _forms(postgres_server_url, "postgres", f"missing_{uuid.uuid4().hex[:8]}")[:1]:
        env = {
            "PATH": "/usr/bin:/bin",
            "AIRFLOW_HOME": str(tmp_path),
            "AIRFLOW_CONN_CRASHSAFE_DEFAULT": url,
        }
        done = subprocess.run(
            [sys.executable, "-m", "airflow_crashsafe.cli.main", "db", "migrate"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "cannot be reached" in done.stderr
        assert SECRET not in done.stdout + done.stderr
