"""The cluster policy's modes: off changes nothing, warn logs once, enforce refuses, protect wraps."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.exceptions import AirflowClusterPolicyViolation
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.http.operators.http import HttpOperator
from airflow.sdk import DAG

from airflow_crashsafe.audit import replay_safe
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.policy import task_policy
from airflow_crashsafe.scan.rules import classify_task


def _dag() -> tuple[DAG, dict[str, Any]]:
    with DAG("policy_dag", schedule=None, start_date=datetime(2024, 1, 1)) as dag:
        tasks = {
            "post": HttpOperator(task_id="post", http_conn_id="api", endpoint="/pay", method="POST"),
            "get": HttpOperator(task_id="get", http_conn_id="api", endpoint="/rates", method="GET"),
            "deferred": HttpOperator(
                task_id="deferred", http_conn_id="api", endpoint="/pay", method="POST", deferrable=True
            ),
            "append": SQLExecuteQueryOperator(
                task_id="append", conn_id="warehouse", sql="INSERT INTO t SELECT * FROM s"
            ),
            "two": SQLExecuteQueryOperator(
                task_id="two", conn_id="warehouse", sql="INSERT INTO t SELECT 1; INSERT INTO u SELECT 2"
            ),
            "declared": replay_safe(
                SQLExecuteQueryOperator(
                    task_id="declared", conn_id="warehouse", sql="INSERT INTO t SELECT 1"
                ),
                reason="t is a scratch table emptied before each run",
            ),
        }
    return dag, tasks


@pytest.fixture
def warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgresql://u@localhost/db")
    monkeypatch.setenv("AIRFLOW_CONN_API", "http://localhost:1")
    from airflow_crashsafe.scan.rules import conn_type_of

    conn_type_of.cache_clear()


def _mode(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__POLICY_MODE", mode)


def test_off_by_default_changes_nothing(warehouse: None) -> None:
    """With no option set the policy neither judges nor wraps anything."""
    _, tasks = _dag()
    for task in tasks.values():
        task_policy(task)
        assert "execute" not in vars(task)


def test_warn_logs_and_records_each_risky_task_once(
    warehouse: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """warn: one warning per risky task with its fix, however often the file is parsed, and its
    verdict in the store for the risk map; nothing wrapped."""
    from airflow_crashsafe.store import open_store, reset_store_cache
    from airflow_crashsafe.store.scans import page

    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "store.db"))
    reset_store_cache()
    _mode(monkeypatch, "warn")
    for _ in range(2):
        _, tasks = _dag()
        with caplog.at_level(logging.WARNING, logger="airflow_crashsafe.policy"):
            for task in tasks.values():
                task_policy(task)
    warned = [r.getMessage() for r in caplog.records if "unsafe to re-run" in r.getMessage()]
    assert sorted(m.split(" ")[2] for m in warned) == [
        "policy_dag.append",
        "policy_dag.deferred",
        "policy_dag.post",
        "policy_dag.two",
    ]
    assert all("Fix:" in m for m in warned)
    assert "execute" not in vars(tasks["post"])
    try:
        with open_store().transaction(immediate=False) as db:
            _, rows = page(db, dag_ids=["policy_dag"], verdicts=["risky"], limit=10)
    finally:
        reset_store_cache()
    assert sorted(r["task_id"] for r in rows) == ["append", "deferred", "post", "two"]


def test_enforce_refuses_risky_but_accepts_declared(warehouse: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """enforce: a risky task is a policy violation naming the fix; safe and replay_safe ones pass."""
    _mode(monkeypatch, "enforce")
    _, tasks = _dag()
    with pytest.raises(AirflowClusterPolicyViolation, match=r"'append'.*Fix: NaturalKeyMergeOperator"):
        task_policy(tasks["append"])
    task_policy(tasks["get"])
    task_policy(tasks["declared"])


def test_protect_wraps_what_it_can_and_warns_about_the_rest(
    warehouse: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """protect: a POST and a one-statement INSERT are wrapped; deferrable HTTP and two statements are not."""
    _mode(monkeypatch, "protect")
    dag, tasks = _dag()
    for task in tasks.values():
        task_policy(task)
    assert "execute" in vars(tasks["post"])
    assert "execute" in vars(tasks["append"])
    assert tasks["append"].crashsafe_fence_target == "t"
    for name in ("get", "deferred", "two", "declared"):
        assert "execute" not in vars(tasks[name]), name
    assert classify_task(tasks["post"], dag).verdict == "protected"
    assert classify_task(tasks["append"], dag).category == "policy_protected"


def test_bad_mode_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mode that does not exist names the four that do."""
    _mode(monkeypatch, "block")
    _, tasks = _dag()
    with pytest.raises(ConfigurationError, match="off, warn, enforce, protect"):
        task_policy(tasks["post"])
