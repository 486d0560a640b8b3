"""The fencing benchmark runs end to end in --quick mode and reports numbers (no timing asserts)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def test_quick_benchmark_runs_and_reports_numbers(postgres_server_url: str, tmp_path: Path) -> None:
    """`python -m benchmarks.fencing --quick` exits 0, prints its tables and finds no lost commit."""
    report = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fencing",
            "--quick",
            "--postgres-url",
            postgres_server_url,
            "--json",
            str(report),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for heading in (
        "Partition overwrite, 1 row(s)",
        "Where the fenced 1-row time goes",
        "Throughput",
        "Targets",
    ):
        assert heading in result.stdout
    numbers = json.loads(report.read_text())
    assert numbers["lost_ok"] is True
    assert math.isfinite(numbers["added_ms_1_row"])
    assert numbers["throughput"]["fenced_per_s"] > 0
