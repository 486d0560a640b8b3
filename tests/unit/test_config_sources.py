"""[crashsafe] options come through Airflow's own configuration: airflow.cfg, env, _CMD and _SECRET.

Each case runs in a fresh interpreter (Airflow's configuration is built once per process), with
the interpreter of the environment under test: CRASHSAFE_TEST_PYTHON when set (CI points it at the
floor release's venv), else this one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.floor  # CI's floor subset (docs/packaging.md, "Version floor")

ROOT = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("CRASHSAFE_TEST_PYTHON", sys.executable)
READ = "import json; from airflow_crashsafe import config; print(json.dumps({name}))"


def _read(expression: str, home: Path, cfg: str = "", **env: str) -> object:
    home.mkdir(parents=True, exist_ok=True)
    (home / "airflow.cfg").write_text(textwrap.dedent(cfg))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__CRASHSAFE__")}
    result = subprocess.run(
        [PYTHON, "-W", "error", "-c", READ.format(name=expression)],
        env={**clean, "AIRFLOW_HOME": str(home), "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_airflow_cfg_section_is_honoured(tmp_path: Path) -> None:
    """A value in airflow.cfg's [crashsafe] section is what the accessor returns."""
    cfg = """
        [crashsafe]
        audit_retention_days = 12
        api_conn_id = my_api
    """
    assert _read("[config.audit_retention_days(), config.api_conn_id()]", tmp_path, cfg) == [12, "my_api"]


def test_sensitive_option_from_a_command_in_the_environment(tmp_path: Path) -> None:
    """AIRFLOW__CRASHSAFE__DEAD_MANS_SWITCH_URL_CMD runs and its output (newline stripped) is the URL."""
    got = _read(
        "config.dead_mans_switch_url()",
        tmp_path,
        AIRFLOW__CRASHSAFE__DEAD_MANS_SWITCH_URL_CMD="echo https://hc-ping.example/uuid-1",
    )
    assert got == "https://hc-ping.example/uuid-1"


def test_sensitive_option_from_a_command_in_airflow_cfg(tmp_path: Path) -> None:
    """dead_mans_switch_url_cmd in airflow.cfg works as Airflow documents for sensitive options."""
    cfg = """
        [crashsafe]
        dead_mans_switch_url_cmd = echo https://hc-ping.example/uuid-2
    """
    assert _read("config.dead_mans_switch_url()", tmp_path, cfg) == "https://hc-ping.example/uuid-2"


@pytest.mark.parametrize("option", ["audit_retention_days", "api_url"])
def test_cmd_is_ignored_for_an_option_that_is_not_sensitive(option: str, tmp_path: Path) -> None:
    """As in Airflow, _CMD applies to sensitive options only: others keep their default."""
    got = _read(f"config.{option}()", tmp_path, **{f"AIRFLOW__CRASHSAFE__{option.upper()}_CMD": "echo 7"})
    assert got not in (7, "7")
