"""The ledger benchmark runs end to end in --quick mode and reports numbers (no timing asserts)."""

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


def test_quick_ledger_benchmark_runs_and_reports_numbers(postgres_server_url: str, tmp_path: Path) -> None:
    """`python -m benchmarks.ledger --quick` exits 0, prints its tables and the added-ms figure."""
    report = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.ledger",
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
    for heading in ("Per call,", "ledger stubbed out", "Where the operator's time goes", "Target"):
        assert heading in result.stdout
    assert "ledger added per call at p50: " in result.stdout
    numbers = json.loads(report.read_text())
    for name in ("requests", "HttpHook (operator minus ledger)", "operator (ledger on PostgreSQL)"):
        assert math.isfinite(numbers["variants"][name]["p50_ms"])
        assert numbers["variants"][name]["p50_ms"] > 0
    assert math.isfinite(numbers["added_ms"])
    assert numbers["store_statements_per_call"] > 0
    assert numbers["bookings"] > 0
