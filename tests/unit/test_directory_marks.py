"""Tests are marked by their directory, so the floor run's marker expression cannot lose a module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Modules without a ``pytestmark`` of their own (the floor run once dropped their 20 tests).
UNMARKED = ("tests/integration/audit/test_audit_store.py", "tests/integration/audit/test_digest.py")


def _collected(*args: str) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing selected
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_the_floor_runs_expression_selects_every_integration_module() -> None:
    """``-m "floor or (integration and not e2e)"`` selects every test of modules that declare no mark."""
    everything = _collected(*UNMARKED)
    assert everything
    assert _collected("-m", "floor or (integration and not e2e)", *UNMARKED) == everything


def test_e2e_tests_are_not_marked_integration() -> None:
    """``-m integration`` means tests/integration: the e2e tests, which boot Airflow, are not in it."""
    assert _collected("tests/e2e/test_drill.py")
    assert _collected("-m", "integration", "tests/e2e/test_drill.py") == []
