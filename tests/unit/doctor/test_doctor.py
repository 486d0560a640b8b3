"""`airflow-crashsafe doctor` without a database: executor settings, findings, text, JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_crashsafe.cli.main import main
from airflow_crashsafe.doctor.airflow_settings import executors
from airflow_crashsafe.doctor.executor import check_celery, check_heartbeat_timeouts
from airflow_crashsafe.doctor.findings import ERROR, HAZARD, OK, SKIPPED, Finding, exit_code
from airflow_crashsafe.errors import ConfigurationError


def statuses(findings: list[Finding]) -> dict[str, str]:
    return {finding.check: finding.status for finding in findings}


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("LocalExecutor", ["LocalExecutor"]),
        ("airflow.providers.celery.executors.celery_executor.CeleryExecutor", ["CeleryExecutor"]),
        ("LocalExecutor, gpu:my.pkg.GpuExecutor", ["LocalExecutor", "GpuExecutor"]),
    ],
)
def test_executor_names_are_read_from_core_executor(
    monkeypatch: pytest.MonkeyPatch, value: str, names: list[str]
) -> None:
    """[core] executor: class paths, aliases and lists give the executors' class names."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", value)
    assert executors() == names


def test_celery_checks_skip_without_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    """LocalExecutor: both Celery checks are skipped, not passed."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    assert set(statuses(check_celery(3600)).values()) == {SKIPPED}


def test_celery_without_acks_late_and_short_visibility_timeout_are_hazards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """acks_late off and a visibility_timeout under the longest task: two hazards, each with a fix."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__CELERY__TASK_ACKS_LATE", "False")
    monkeypatch.setenv("AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT", "600")
    findings = check_celery(3600)
    assert statuses(findings) == {"celery_acks_late": HAZARD, "celery_visibility_timeout": HAZARD}
    assert all(finding.fix for finding in findings)
    assert "TASK_ACKS_LATE=True" in findings[0].fix


def test_celery_with_safe_settings_is_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    """acks_late on (Airflow's default) and the broker's default visibility_timeout: no hazard."""
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.delenv("AIRFLOW__CELERY__TASK_ACKS_LATE", raising=False)
    monkeypatch.delenv("AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT", raising=False)
    assert set(statuses(check_celery(3600)).values()) == {OK}
    monkeypatch.setenv("AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT", "600")
    assert statuses(check_celery(300))["celery_visibility_timeout"] == OK


def test_short_heartbeat_timeouts_are_hazards(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 60 s task heartbeat timeout and a threshold of two scheduler beats are hazards; defaults are not."""
    assert set(statuses(check_heartbeat_timeouts()).values()) == {OK}
    monkeypatch.setenv("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "60")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD", "10")
    findings = check_heartbeat_timeouts()
    assert statuses(findings) == {"task_heartbeat_timeout": HAZARD, "scheduler_health_threshold": HAZARD}
    assert "at least 15" in findings[1].fix


def test_a_setting_that_is_not_a_number_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-numeric timeout raises ConfigurationError naming the option."""
    monkeypatch.setenv("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="task_instance_heartbeat_timeout"):
        check_heartbeat_timeouts()


@pytest.mark.parametrize(
    ("found", "code"),
    [([OK, SKIPPED], 0), ([OK, HAZARD, ERROR], 1), ([OK, ERROR], 3)],
)
def test_exit_code_says_hazard_before_unchecked(found: list[str], code: int) -> None:
    """1 for any hazard, else 3 when something could not be checked, else 0."""
    assert exit_code([Finding("c", status, "s") for status in found]) == code


def test_doctor_command_prints_json_and_exits_by_its_findings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`doctor --json` on an unreadable SQLite metadata DB and Celery without acks_late: exit 1, JSON."""
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path}/missing.db")
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    monkeypatch.setenv("AIRFLOW__CELERY__TASK_ACKS_LATE", "False")
    assert main(["doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    by_check = {f["check"]: f for f in report["findings"]}
    assert by_check["celery_acks_late"]["status"] == HAZARD
    assert by_check["metadata_idle_transaction_timeout"]["status"] == SKIPPED
    assert by_check["triggerer_for_adoption"]["status"] == ERROR
    assert by_check["store_connection"]["status"] == HAZARD  # embedded store, several hosts
    assert report["exit_code"] == 1
    assert report["hazards"] == 2


def test_doctor_text_output_prints_each_hazard_with_its_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plain output: one line per finding, `fix:` under each hazard, a count at the end."""
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path}/missing.db")
    monkeypatch.setenv("AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT", "30")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "HAZARD   task_heartbeat_timeout" in out
    assert "fix: set it to at least 120" in out
    assert out.rstrip().endswith("1 hazard(s) found")
