"""The ledger benchmark runs end to end in --quick mode and reports numbers (no timing asserts)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.integration.benchmarks.quick_run import run_quick

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_ledger_benchmark_runs_and_reports_numbers(postgres_server_url: str, tmp_path: Path) -> None:
    """`python -m benchmarks.ledger --quick` exits 0, prints its tables and the added-ms figure."""
    stdout, numbers = run_quick("benchmarks.ledger", postgres_server_url, tmp_path)
    for heading in ("Per call,", "ledger stubbed out", "Where the operator's time goes", "Target"):
        assert heading in stdout
    assert "ledger added per call at p50: " in stdout
    names = (
        "requests",
        "HttpHook (no operator, no ledger)",
        "operator, ledger stubbed out",
        "operator (ledger on PostgreSQL)",
    )
    for name in names:
        assert math.isfinite(numbers["variants"][name]["p50_ms"])
        assert numbers["variants"][name]["p50_ms"] > 0
    assert math.isfinite(numbers["added_ms"])
    assert math.isfinite(numbers["added_vs_hook_ms"])
    assert numbers["store_statements_per_call"] > 0
    assert numbers["bookings"] > 0
