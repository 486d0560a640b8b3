"""Fixtures of the engine matrix: a fresh target of every engine, a private store, a live triggerer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_crashsafe.store.store import reset_store_cache
from tests.support.airflow_health import api_server_health, health_body
from tests.support.engines import ENGINES
from tests.support.sql_target import SqlTarget


@pytest.fixture(params=list(ENGINES))
def target(request: pytest.FixtureRequest, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """A fresh target database of each engine, defined as the Airflow connection ``crashsafe_target``."""
    url: str = request.getfixturevalue(ENGINES[request.param])
    return SqlTarget(conn_id=airflow_conn("crashsafe_target", url), url=url, dialect=request.param)


@pytest.fixture(autouse=True)
def _private_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Events of this test go to an embedded store of its own."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__CONN_ID", "crashsafe_store_not_defined")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "store.db"))
    reset_store_cache()
    yield
    reset_store_cache()


@pytest.fixture(autouse=True)
def _healthy_triggerer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A triggerer heartbeats (the api-server's health says so), as in the operator tests."""
    with api_server_health(monkeypatch, health_body()):
        yield
