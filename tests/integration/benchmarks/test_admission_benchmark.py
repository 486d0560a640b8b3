"""The admission benchmark runs end to end in --quick mode and reports numbers (no timing asserts)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.integration.benchmarks.quick_run import run_quick

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_admission_benchmark_runs_and_reports_numbers(postgres_server_url: str, tmp_path: Path) -> None:
    """`python -m benchmarks.admission --quick` exits 0 and prints the per-task admission cost at p50."""
    stdout, numbers = run_quick("benchmarks.admission", postgres_server_url, tmp_path)
    assert "admission cost per task at p50: " in stdout
    for name in ("recovery_admission", "lease only"):
        assert math.isfinite(numbers["variants"][name]["p50_ms"])
        assert numbers["variants"][name]["p50_ms"] > 0
    assert numbers["p50_ms"] == numbers["variants"]["recovery_admission"]["p50_ms"]
