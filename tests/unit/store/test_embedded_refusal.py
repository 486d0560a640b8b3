"""The embedded SQLite store is refused when the executor can run tasks on several hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.doctor.findings import HAZARD, OK
from airflow_crashsafe.doctor.store_conn import check_store_connection
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.store import open_store

FLEET = [
    "CeleryExecutor",
    "KubernetesExecutor",
    "airflow.providers.edge3.executors.EdgeExecutor",
    "LocalExecutor,CeleryExecutor",
    "my_company.executors.FancyExecutor",
]
ONE_HOST = ["LocalExecutor", "SequentialExecutor", "fast:airflow.executors.local_executor.LocalExecutor"]


@pytest.fixture(autouse=True)
def _no_store_connection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No crashsafe_default connection; the embedded file in this test's temp dir."""
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "crashsafe.db"))


@pytest.mark.parametrize("executor", FLEET)
def test_fleet_executor_refuses_the_embedded_store(monkeypatch: pytest.MonkeyPatch, executor: str) -> None:
    """A multi-host executor without the store connection is a ConfigurationError naming what to create."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    with pytest.raises(ConfigurationError) as caught:
        open_store()
    message = str(caught.value)
    assert "crashsafe_default" in message
    assert "AIRFLOW_CONN_CRASHSAFE_DEFAULT=postgresql://" in message
    assert "allow_embedded_store_on_fleet" in message
    # the doctor calls the same hazard
    assert [f.status for f in check_store_connection()] == [HAZARD]


@pytest.mark.parametrize("executor", ONE_HOST)
def test_single_host_executor_uses_the_embedded_store(monkeypatch: pytest.MonkeyPatch, executor: str) -> None:
    """LocalExecutor and friends keep the embedded store (one host, one file)."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    assert config.multi_host_executors() == []
    assert open_store().migrate() >= 1
    assert [f.status for f in check_store_connection()] == [OK]


def test_override_allows_the_embedded_store_on_a_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    """allow_embedded_store_on_fleet = True lets those who know use the embedded store anyway."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ALLOW_EMBEDDED_STORE_ON_FLEET", "True")
    assert open_store().migrate() >= 1


def test_timeouts_must_be_positive(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero or negative store timeout is a ConfigurationError naming the option."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__STORE_STATEMENT_TIMEOUT_SECONDS", "0")
    with pytest.raises(ConfigurationError, match="store_statement_timeout_seconds"):
        config.store_statement_timeout_seconds()
