"""The fencing benchmark runs end to end in --quick mode and reports paired figures (no timing asserts)."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import psycopg
import pytest

from benchmarks.paired import (
    ClusterCpu,
    Comparison,
    Pair,
    Quiet,
    Run,
    block_bootstrap_ci,
    run_pairs,
    sign_test_ci,
)
from tests.integration.benchmarks.quick_run import run_quick

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_quick_benchmark_runs_and_reports_numbers(postgres_server_url: str, tmp_path: Path) -> None:
    """`benchmarks.fencing --quick` exits 0, prints paired tables with intervals, loses no commit."""
    stdout, numbers = run_quick("benchmarks.fencing", postgres_server_url, tmp_path)
    for heading in (
        "Partition overwrite, 1 row(s)",
        "Partition overwrite, 10,000 row(s)",
        "plain again (A/A control)",
        "Where the fenced 1-row time goes",
        "Where the fenced 10,000-row time goes",
        "Throughput",
        "Targets",
    ):
        assert heading in stdout
    assert numbers["lost_ok"] is True
    assert math.isfinite(numbers["added_ms_1_row"])
    for key in ("added_pct_big_ci", "aa_pct_big_ci"):  # 6 pairs in --quick: enough for a 95 % interval
        low, high = numbers[key]
        assert low <= high
    assert numbers["throughput"]["fenced_per_s"] > 0
    assert "moving-block bootstrap CI" in stdout
    assert numbers["added_pct_big_block_ci"] is None  # 6 pairs: fewer than 4 blocks


def test_quick_mariadb_benchmark_runs_and_reports_every_measure(
    mariadb_server_url: str, tmp_path: Path
) -> None:
    """`benchmarks.fencing_mariadb --quick` on a given server exits 0 and reports each measure of
    the 100k verdict (here 10k rows): the paired median, the block bootstrap, the fastest decile,
    what fenced does outside the body, and the row operations fenced adds (the fence row)."""
    stdout, numbers = run_quick("benchmarks.fencing_mariadb", mariadb_server_url, tmp_path, "--mariadb-url")
    for line in (
        "Partition overwrite on MariaDB, 1 row(s)",
        "Partition overwrite on MariaDB, 10,000 row(s)",
        "moving-block bootstrap CI",
        "fastest decile of each arm",
        "fenced outside the body (per run)",
    ):
        assert line in stdout
    assert 0 < numbers["added_ms_1_row"] < 100
    low, high = numbers["added_pct_big_ci"]
    assert low <= high
    assert numbers["added_pct_big_block_ci"] is None  # 6 pairs: fewer than 4 blocks
    assert numbers["work:10000"]["Handler_write"] == [10_000, 10_001]


def test_sign_test_interval_uses_the_binomial_order_statistics() -> None:
    """Too few pairs give no interval; 6 give the extremes (96.9 %); 20 give the 6th and 15th values."""
    assert sign_test_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert sign_test_ci([6.0, 1.0, 5.0, 2.0, 4.0, 3.0]) == (1.0, 6.0, 1 - 2 / 64)
    low, high, coverage = sign_test_ci([float(v) for v in range(1, 21)]) or (0, 0, 0)
    assert (low, high) == (6.0, 15.0)
    assert coverage == pytest.approx(0.9586, abs=1e-4)


def test_block_bootstrap_widens_the_interval_when_neighbouring_pairs_drift_together() -> None:
    """Ratios that share a level in runs of 8 (a VM's speed over seconds): the sign test, which takes the
    pairs as independent, gives a narrower interval than the moving-block bootstrap, which keeps
    them together; on independent ratios both are about as wide. Too few ratios give none."""
    rng = random.Random(7)
    levels = [rng.gauss(0, 0.03) for _ in range(25)]  # one speed per 8 neighbouring pairs
    drifting = [1.0 + levels[i // 8] + rng.gauss(0, 0.003) for i in range(200)]
    independent = [1.0 + rng.gauss(0, 0.03) for _ in range(200)]

    def width(ci: tuple[float, float, float] | None) -> float:
        assert ci is not None
        return ci[1] - ci[0]

    assert block_bootstrap_ci(drifting, block=8) == block_bootstrap_ci(drifting, block=8)  # seeded
    assert width(block_bootstrap_ci(drifting, block=8)) > 1.3 * width(sign_test_ci(drifting))
    assert width(block_bootstrap_ci(independent, block=8)) < 1.3 * width(sign_test_ci(independent))
    low, high, level = block_bootstrap_ci(independent) or (0, 0, 0)
    assert low < 1.0 < high
    assert level == 0.95
    assert block_bootstrap_ci([1.0] * 15) is None


def test_pairs_run_abba_then_baab_with_the_preparation_before_every_run() -> None:
    """Pairs run ABBA, then BAAB, each run after an untimed prepare; warm-up rounds unrecorded."""
    calls: list[str] = []
    comp = Comparison("b", lambda: calls.append("A"), lambda: calls.append("B"))
    run_pairs([comp], 2, warmup=1, prepare=lambda: calls.append("p"))
    assert "".join(calls) == "pApBpBpA" + "pBpApApB" + "pApBpBpA"
    assert len(comp.pairs) == 2
    pair = Pair(a=[Run(1.0, 2.0), Run(3.0, 2.0)], b=[Run(2.0, 3.0), Run(2.2, 3.0)])
    assert pair.wall_ratio() == pytest.approx(1.05)
    assert pair.wall_added() == pytest.approx(0.1)
    assert pair.cpu_ratio() == pytest.approx(1.5)


def test_cluster_cpu_counts_the_server_backends_work(postgres_server_url: str) -> None:
    """On a local server the meter sees CPU time grow while a backend computes."""
    meter = ClusterCpu.of_server(postgres_server_url)
    if meter is None:
        pytest.skip("the test server is not a local cluster this process can read")
    with psycopg.connect(postgres_server_url) as conn:  # a backend's time leaves with it: read inside
        conn.execute("SELECT 1").fetchone()
        meter.refresh()  # the backend of this connection is new
        before = meter.seconds()
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
        assert meter.seconds() - before > 0.05


def test_quiet_waits_for_a_quiet_machine_but_not_past_its_limit() -> None:
    """A pair starts at once when the machine is quiet enough, and after ``wait`` seconds when it never is."""
    start = time.monotonic()
    Quiet(cores=1000.0, wait=30.0).settle()
    assert time.monotonic() - start < 5
    start = time.monotonic()
    Quiet(cores=-1.0, wait=1.0).settle()
    assert 1.0 <= time.monotonic() - start < 10
    comp = Comparison("b", lambda: None, lambda: time.sleep(0.01))
    run_pairs([comp], 1, warmup=0)
    assert comp.pairs[0].others is None or comp.pairs[0].others >= 0
