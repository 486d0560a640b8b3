"""The watchdog and the alert sinks import and run without Airflow installed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

BLOCKER = textwrap.dedent(
    """
    import sys

    class BlockAirflow:
        def find_spec(self, name, path=None, target=None):
            if name == "airflow" or name.startswith("airflow."):
                raise ImportError(f"airflow is not installed here (blocked: {name})")
            return None

    sys.meta_path.insert(0, BlockAirflow())
    """
)


@pytest.mark.parametrize(
    "module",
    [
        "airflow_crashsafe.watchdog.cli",
        "airflow_crashsafe.watchdog.loop",
        "airflow_crashsafe.watchdog.api",
        "airflow_crashsafe.watchdog.db",
        "airflow_crashsafe.watchdog.wedge",
        "airflow_crashsafe.watchdog.pg_sessions",
        "airflow_crashsafe.watchdog.wedge_alerts",
        "airflow_crashsafe.component_identity.name",
        "airflow_crashsafe.alerting",
        "airflow_crashsafe.alerting.incidents",
        "airflow_crashsafe.watchdog.rules",
        "airflow_crashsafe.watchdog.deadline_rules",
        "airflow_crashsafe.watchdog.deadline_watch",
        "airflow_crashsafe.watchdog.run_fetchers",
        "airflow_crashsafe.errors",
    ],
)
def test_module_imports_with_airflow_blocked(module: str) -> None:
    """With `import airflow` made to fail, the module imports and pulls in no airflow module."""
    code = BLOCKER + textwrap.dedent(
        f"""
        import importlib
        importlib.import_module({module!r})
        bad = [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
        assert not bad, bad
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_watch_once_runs_with_airflow_blocked(tmp_path: Path) -> None:
    """A whole `watch --once` poll (against a closed port) runs, alerts and exits 1 without Airflow."""
    code = BLOCKER + textwrap.dedent(
        f"""
        import argparse
        from airflow_crashsafe.watchdog import cli
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        args = parser.parse_args(["--api-url", "http://127.0.0.1:9", "--grace", "0", "--once",
                                  "--state-dir", {str(tmp_path)!r}])
        rc = cli.run(args)
        assert not [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
        sys.exit(rc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert "api_unreachable" in result.stderr
