"""The fencing benchmark runs end to end in --quick mode and reports numbers (no timing asserts)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.integration.benchmarks.quick_run import run_quick

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_benchmark_runs_and_reports_numbers(postgres_server_url: str, tmp_path: Path) -> None:
    """`python -m benchmarks.fencing --quick` exits 0, prints its tables and finds no lost commit."""
    stdout, numbers = run_quick("benchmarks.fencing", postgres_server_url, tmp_path)
    for heading in (
        "Partition overwrite, 1 row(s)",
        "Where the fenced 1-row time goes",
        "Throughput",
        "Targets",
    ):
        assert heading in stdout
    assert numbers["lost_ok"] is True
    assert math.isfinite(numbers["added_ms_1_row"])
    assert numbers["throughput"]["fenced_per_s"] > 0
