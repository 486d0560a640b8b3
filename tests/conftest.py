"""Session-wide test set-up and the fixtures every test may use.

Fixtures: ``postgres_server_url`` (session; admin URL of a real PostgreSQL), ``postgres_url`` (a
fresh database for one test, dropped afterwards), ``mariadb_server_url`` / ``mariadb_url`` (the
same on a throwaway MariaDB; ``mariadb_connector_url`` reaches it through mysql-connector-python),
``sqlite_url`` and ``duckdb_url`` (temp files),
``airflow_conn`` (sets ``AIRFLOW_CONN_<ID>`` for one test) and ``configured_store`` (the crashsafe
store as configured, on PostgreSQL and on the embedded SQLite file).

``AIRFLOW_HOME`` is pointed at a temp dir here, at import time, because Airflow reads it once when
first imported and must never touch ``~/airflow`` from a test.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

if "airflow" in sys.modules:  # pragma: no cover - would defeat the isolation below
    raise RuntimeError("airflow was imported before tests/conftest.py could isolate AIRFLOW_HOME")

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="crashsafe-airflow-home-")
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
# Airflow's example DAGs and example plugins are noise in every test that loads DAGs or plugins.
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# AIRFLOW__CORE__UNIT_TEST_MODE is deliberately not set: in 3.3.2 it swaps in Airflow's own
# unit_tests.cfg (load_examples=True, Airflow's test DAG folders) and only relaxes the
# "execute() called outside the task runner" check, which merely logs a warning by default.

from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

from airflow_crashsafe.store.store import Store  # noqa: E402
from airflow_crashsafe.testing.postgres import (  # noqa: E402
    PostgresUnavailable,
    drop_database,
    make_database,
    start_cluster,
)
from tests.support.ci import in_ci  # noqa: E402
from tests.support.engines import ENGINES, MYSQL_CLIENTS  # noqa: E402

#: The suite's own plugins: a time limit nothing in a test can disarm, and CI's check of skips.
pytest_plugins = ["tests.plugins.time_limit", "tests.plugins.skips"]


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (what ``./dev test`` passes): see tests/support/lanes.py."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own reading of it
    from tests.support.lanes import worker_count

    return worker_count(config)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """xdist's default ``--dist load`` becomes the e2e lanes (tests/support/lanes.py); an explicit
    other ``--dist`` keeps xdist's scheduler."""
    if config.getvalue("dist") != "load":
        return None
    from tests.support.lanes import LaneScheduling

    return LaneScheduling(config, log)


#: Marks every test under a directory carries, whatever its module declares: the floor run
#: (``-m "floor or (integration and not e2e)"``, .ci/run) selects by them, so a module that forgot
#: its ``pytestmark`` must not drop out of it. The e2e tests are not marked ``integration``:
#: ``-m integration`` means tests/integration, and the floor run leaves the e2e ones out anyway.
DIRECTORY_MARKS = {"tests/integration/": ("integration",), "tests/e2e/": ("e2e", "slow")}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its directory (:data:`DIRECTORY_MARKS`)."""
    for item in items:
        where = item.nodeid.replace("\\", "/")
        for directory, names in DIRECTORY_MARKS.items():
            if where.startswith(directory):
                for name in names:
                    if item.get_closest_marker(name) is None:
                        item.add_marker(name)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a shared lane, the e2e lanes' Airflow components get the CPU first (tests/support/lanes.py)."""
    from tests.support.lanes import yield_to_e2e

    yield_to_e2e(item.nodeid)


@pytest.fixture(autouse=True)
def _fresh_crashsafe_config() -> Iterator[None]:
    """Each test reads ``[crashsafe]`` options and opens the store afresh (tests change them via the env)."""
    from airflow_crashsafe import config
    from airflow_crashsafe.store import reset_store_cache

    config.reset_cache()
    yield
    config.reset_cache()
    reset_store_cache()  # a store opened under this test's settings must not serve the next test


@pytest.fixture(autouse=True)
def _close_audit_writers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each audit writer a test starts is closed when it ends: a writer's thread polls every tick
    until closed, and the threads of earlier tests slow the drains later timing-bound tests measure."""
    from airflow_crashsafe.audit.writer import Writer

    made: list[Writer] = []
    build = Writer.__init__

    def recording(self: Writer, *args: object, **kwargs: object) -> None:
        build(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(Writer, "__init__", recording)
    yield
    for writer in made:
        writer.close(timeout=0)


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    """Admin URL of a real PostgreSQL: ``$CRASHSAFE_TEST_POSTGRES_URL``, else a throwaway cluster."""
    configured = os.environ.get("CRASHSAFE_TEST_POSTGRES_URL")
    if configured:
        yield configured
        return
    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        hint = (
            f"{exc}; `./dev test` installs them, or set CRASHSAFE_TEST_POSTGRES_URL to a server's admin URL"
        )
        if in_ci():
            pytest.fail(f"CI needs PostgreSQL: {hint}", pytrace=False)
        pytest.skip(hint)
    try:
        yield cluster.admin_url
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """URL of a new, empty database made for this test alone; dropped when the test ends."""
    url = make_database(postgres_server_url)
    try:
        yield url
    finally:
        drop_database(postgres_server_url, url)


@pytest.fixture(scope="session")
def mariadb_server_url() -> Iterator[str]:
    """Admin URL of a real MariaDB: ``$CRASHSAFE_TEST_MARIADB_URL``, else a throwaway server."""
    from airflow_crashsafe.testing.mariadb import MariaDbUnavailable, start_server

    configured = os.environ.get("CRASHSAFE_TEST_MARIADB_URL")
    if configured:
        yield configured
        return
    try:
        server = start_server()
    except MariaDbUnavailable as exc:
        hint = f"{exc}; `./dev` installs it, or set CRASHSAFE_TEST_MARIADB_URL to a server's admin URL"
        if in_ci():
            pytest.fail(f"CI needs MariaDB: {hint}", pytrace=False)
        pytest.skip(hint)
    try:
        yield server.admin_url
    finally:
        server.stop()


@pytest.fixture
def mariadb_url(mariadb_server_url: str) -> Iterator[str]:
    """URL of a new, empty MariaDB database made for this test alone; dropped when the test ends."""
    from airflow_crashsafe.testing.mariadb import drop_database as drop_mariadb
    from airflow_crashsafe.testing.mariadb import make_database as make_mariadb

    url = make_mariadb(mariadb_server_url)
    try:
        yield url
    finally:
        drop_mariadb(mariadb_server_url, url)


@pytest.fixture
def mariadb_connector_url(mariadb_url: str) -> str:
    """:func:`mariadb_url` opened through mysql-connector-python (``?client=``, as a connection's extra)."""
    return f"{mariadb_url}?client=mysql-connector-python"


@pytest.fixture(params=list(MYSQL_CLIENTS))
def mariadb_client_url(request: pytest.FixtureRequest) -> str:
    """A fresh MariaDB database through each MySQL client MySqlHook opens (``tests.support.engines``)."""
    url: str = request.getfixturevalue(ENGINES[request.param])
    return url


@pytest.fixture(scope="session")
def snowflake_server() -> Iterator[Any]:
    """A Snowflake emulator (``fakesnow``'s server) for the session; skipped when not installed."""
    from airflow_crashsafe.testing.fakesnow import FakesnowUnavailable, start_server, use_plain_http

    try:
        server = start_server()
    except FakesnowUnavailable as exc:
        hint = f"Snowflake emulator unavailable: {exc}; `./dev` installs it"
        if in_ci():
            pytest.fail(f"CI needs fakesnow: {hint}", pytrace=False)
        pytest.skip(hint)
    use_plain_http()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def snowflake_url(snowflake_server: Any) -> str:
    """URL of a new, empty database of the Snowflake emulator, for this test alone."""
    from airflow_crashsafe.testing.fakesnow import make_url

    return make_url(snowflake_server)


@pytest.fixture
def duckdb_url(tmp_path: Path) -> str:
    """``duckdb:////abs/path`` of a DuckDB file (not yet created) in this test's temp dir."""
    return f"duckdb:///{tmp_path / 'test.duckdb'}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """``sqlite:////abs/path`` of a SQLite file (not yet created) in this test's temp dir."""
    return f"sqlite:///{tmp_path / 'test.db'}"


@pytest.fixture
def airflow_conn(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """Factory ``airflow_conn(conn_id, url) -> conn_id`` defining an Airflow connection for one test.

    ``url`` is Airflow's URI form: ``postgresql://user:pass@host:port/db`` (conn_type postgres) or
    ``sqlite:////abs/path.db`` (conn_type sqlite; Airflow puts the path in ``schema``).
    """

    def define(conn_id: str, url: str) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", url)
        return conn_id

    return define


@pytest.fixture(params=["postgres", "sqlite"])
def configured_store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Store]:
    """The crashsafe store ``open_store()`` gives, on PostgreSQL or on the embedded SQLite file."""
    from airflow_crashsafe.store import open_store, reset_store_cache

    if request.param == "postgres":
        monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", request.getfixturevalue("postgres_url"))
    else:
        monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
        monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "crashsafe.db"))
    reset_store_cache()
    yield open_store()
    reset_store_cache()
