"""The [crashsafe] option accessors: env overrides, defaults, and clear errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.errors import ConfigurationError


def test_alerting_options_default_and_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The alerting DAG's options read their README defaults, and AIRFLOW__CRASHSAFE__* wins."""
    for name in (
        "API_CONN_ID",
        "DEAD_MANS_SWITCH_URL",
        "ALERTING_CONFIG",
        "ALERTING_STATE_DIR",
        "ALERTING_INSTANCE",
    ):
        monkeypatch.delenv(f"AIRFLOW__CRASHSAFE__{name}", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    assert config.api_conn_id() == "crashsafe_api"
    assert (config.dead_mans_switch_url(), config.alerting_config(), config.alerting_instance()) == (
        None,
        None,
        None,
    )
    assert config.alerting_state_dir() == tmp_path / "crashsafe-alerting"
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__API_CONN_ID", "other_api")
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ALERTING_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ALERTING_INSTANCE", "prod-eu")
    config.reset_cache()
    assert config.api_conn_id() == "other_api"
    assert config.alerting_state_dir() == tmp_path / "state"
    assert config.alerting_instance() == "prod-eu"


def test_a_number_option_that_is_not_a_number_says_which_and_how(monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-numeric value raises ConfigurationError naming the option, its env variable and an example."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__AUDIT_TIMEOUT_SECONDS", "half a second")
    with pytest.raises(
        ConfigurationError, match=r"audit_timeout_seconds = 'half a second' is not a number"
    ) as err:
        config.audit_timeout_seconds()
    assert "AIRFLOW__CRASHSAFE__AUDIT_TIMEOUT_SECONDS" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_bad_on_kill_unit_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """on_kill_unit accepts only leave or cancel."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__ON_KILL_UNIT", "explode")
    with pytest.raises(ConfigurationError, match="set it to 'leave' or 'cancel'"):
        config.on_kill_unit()
