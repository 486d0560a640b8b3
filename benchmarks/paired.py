"""Paired A/B timing for benchmarks on a shared, noisy machine.

Other people's tests run beside ours, so two separate series of timings drift apart by more than a
few per cent. Here every comparison is made of *pairs*: within a pair the two variants run in ABBA
order (BAAB in every other round), each run preceded by the same untimed preparation, so load that
rises or falls linearly over a quartet hits A and B alike. Each pair gives one ratio
``(B1 + B2) / (A1 + A2)``; the result is the median of the ratios with a distribution-free
confidence interval (the sign test's order statistics). An A/A comparison, made exactly the same
way, shows what the method reads when there is nothing to find.

Server CPU time (``/proc/<pid>/schedstat`` of every process of a local cluster, nanoseconds on the
CPU) is paired the same way: it leaves out the time the server waits for a core, though a busy
machine still slows the work itself (shared caches, a busy hyperthread sibling). How busy the rest
of the machine was is recorded per pair, and ``Quiet`` can hold each pair until it is quiet.
"""

from __future__ import annotations

import gc
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = [
    "ClusterCpu",
    "Comparison",
    "CpuMeter",
    "Pair",
    "Quiet",
    "Run",
    "Summary",
    "block_bootstrap_ci",
    "ci_text",
    "load_average",
    "low_quantile_ratio",
    "pct",
    "print_block_verdict",
    "print_table",
    "run_pairs",
    "sign_test_ci",
    "summarize",
    "verdict",
]

Step = Callable[[], None]


class CpuMeter(Protocol):
    """CPU seconds the server under test has used so far (``ClusterCpu`` or another meter)."""

    def refresh(self) -> None: ...

    def seconds(self) -> float: ...


class ClusterCpu:
    """CPU seconds used so far by the processes of one local PostgreSQL cluster (from ``/proc``).

    The postmaster's pid is read from ``postmaster.pid``; its children (backends, WAL writer,
    checkpointer, ...) are listed again by ``refresh()`` (scanning ``/proc`` takes milliseconds, so
    not at every reading: ``run_pairs`` refreshes before each pair). A backend that exits between two
    readings takes its time with it: keep connections open across a run.
    """

    def __init__(self, datadir: Path) -> None:
        self.postmaster = int((datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        self.pids = self._pids()

    def refresh(self) -> None:
        self.pids = self._pids()

    @staticmethod
    def _cpu_ns(pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def _pids(self) -> list[int]:
        pids = [self.postmaster]
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            if int(stat.rsplit(")", 1)[1].split()[1]) == self.postmaster:
                pids.append(int(entry.name))
        return pids

    def seconds(self) -> float:
        return sum(self._cpu_ns(pid) for pid in self.pids) / 1e9

    @classmethod
    def of_server(cls, admin_url: str) -> ClusterCpu | None:
        """The meter of the server at ``admin_url`` when it runs on this machine and we may read it."""
        import psycopg

        try:
            with psycopg.connect(admin_url, autocommit=True) as conn:
                row = conn.execute("SHOW data_directory").fetchone()
            meter = cls(Path(row[0])) if row else None
        except (psycopg.Error, OSError, ValueError):
            return None
        return meter if meter is not None and meter.seconds() > 0 else None


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Freeze what lives now (``gc.freeze``) until the end: each run's collection then looks only
    at objects made since. With Airflow imported a full collection takes ~0.1 s, and run_pairs
    collects before every one of its hundreds of runs."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """Collect now and keep the cyclic collector off inside (it is not what is measured)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass
class Run:
    """One timed run: wall seconds, and the cluster's CPU seconds when measured."""

    wall: float
    cpu: float | None


@dataclass
class Pair:
    """Two runs of A and two of B, made in ABBA or BAAB order."""

    a: list[Run] = field(default_factory=list)
    b: list[Run] = field(default_factory=list)
    #: CPU cores the rest of the machine (not this process, not the cluster) kept busy meanwhile.
    others: float | None = None

    def wall_ratio(self) -> float:
        return sum(r.wall for r in self.b) / sum(r.wall for r in self.a)

    def wall_added(self) -> float:
        """Seconds B added per run over A, within the pair."""
        return (sum(r.wall for r in self.b) - sum(r.wall for r in self.a)) / 2

    def cpu_ratio(self) -> float | None:
        if any(r.cpu is None for r in self.a + self.b):
            return None
        a = sum(r.cpu or 0.0 for r in self.a)
        return sum(r.cpu or 0.0 for r in self.b) / a if a > 0 else None


@dataclass
class Comparison:
    """B against A: ``a`` and ``b`` each do one run; ``prepare`` restores the state before each."""

    name: str
    a: Step
    b: Step
    pairs: list[Pair] = field(default_factory=list)


def _machine_busy() -> float:
    """CPU seconds every process of the machine has used so far (``/proc/stat``; 0 elsewhere)."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


@dataclass
class Quiet:
    """Before a pair, wait until the rest of the machine keeps fewer than ``cores`` busy (sampled
    over 0.3 s while we are idle), but no longer than ``wait`` seconds; short pairs are checked
    once per ``every`` seconds of work, so that the checks do not dominate."""

    cores: float
    wait: float
    every: float = 1.0
    _last: float = -math.inf

    def settle(self) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            return
        deadline = now + self.wait
        while True:
            busy0 = _machine_busy()
            time.sleep(0.3)
            if (_machine_busy() - busy0) / 0.3 < self.cores or time.monotonic() >= deadline:
                break
        self._last = time.monotonic()


class _OthersMeter:
    """Cores the rest of the machine kept busy between ``start()`` and ``stop()``."""

    def __init__(self, cpu: CpuMeter | None) -> None:
        self.cpu = cpu

    def _sample(self) -> tuple[float, float, float, float]:
        return time.monotonic(), _machine_busy(), time.process_time(), self.cpu.seconds() if self.cpu else 0.0

    def start(self) -> None:
        self.t0 = self._sample()

    def stop(self) -> float | None:
        t1 = self._sample()
        wall, busy, own, cluster = (b - a for a, b in zip(self.t0, t1, strict=True))
        return max(0.0, (busy - own - cluster) / wall) if wall > 0 and busy > 0 else None


def _timed(step: Step, prepare: Step | None, cpu: CpuMeter | None) -> Run:
    if prepare is not None:
        prepare()
    with _quiet_gc():
        cpu0 = cpu.seconds() if cpu else None
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
        cpu1 = cpu.seconds() if cpu else None
    return Run(wall, None if cpu0 is None or cpu1 is None else cpu1 - cpu0)


def run_pairs(
    comparisons: list[Comparison],
    pairs: int,
    *,
    warmup: int = 1,
    prepare: Step | None = None,
    cpu: CpuMeter | None = None,
    quiet: Quiet | None = None,
) -> None:
    """Fill each comparison's ``pairs``: ``warmup`` unrecorded rounds, then ``pairs`` rounds.

    A round makes one pair of every comparison, comparisons in a rotating order, ABBA in even
    rounds and BAAB in odd ones; with ``quiet``, each pair waits for a quiet machine first.
    """
    others = _OthersMeter(cpu)
    with _frozen_heap():
        for rnd in range(warmup + pairs):
            k = rnd % len(comparisons)
            for comp in comparisons[k:] + comparisons[:k]:
                if quiet is not None:
                    quiet.settle()
                if cpu is not None:
                    cpu.refresh()
                pair = Pair()
                order = "ABBA" if rnd % 2 == 0 else "BAAB"
                others.start()
                for arm in order:
                    run = _timed(comp.a if arm == "A" else comp.b, prepare, cpu)
                    (pair.a if arm == "A" else pair.b).append(run)
                pair.others = others.stop()
                if rnd >= warmup:
                    comp.pairs.append(pair)


def sign_test_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float] | None:
    """(low, high, coverage): order statistics bounding the median with at least ``level`` coverage.

    Distribution-free: ``[x_(r), x_(n-r+1)]`` covers the median with probability
    ``1 - 2 P(Bin(n, 1/2) <= r - 1)``; ``r`` is the largest that keeps that >= ``level``. None
    when there are too few values for any interval at that level (fewer than 6 at 95 %).
    """
    n = len(values)
    xs = sorted(values)
    tail, r = 0.0, 0
    for j in range(n):
        tail_next = tail + math.comb(n, j) / 2**n
        if 2 * tail_next > 1 - level:
            break
        tail, r = tail_next, j + 1
    if r == 0:
        return None
    return xs[r - 1], xs[n - r], 1 - 2 * tail


@dataclass
class Summary:
    """Median of the per-pair ratios (and of the added seconds), with sign-test intervals."""

    n: int
    ratio: float
    ratio_ci: tuple[float, float, float] | None
    added: float
    added_ci: tuple[float, float, float] | None
    cpu_ratio: float | None
    cpu_ratio_ci: tuple[float, float, float] | None
    a_p50: float
    b_p50: float
    others_p50: float | None
    ratios: list[float]
    others: list[float | None]

    def as_dict(self) -> dict[str, object]:
        return {
            "pairs": self.n,
            "ratio_p50": self.ratio,
            "ratio_ci": list(self.ratio_ci) if self.ratio_ci else None,
            "added_ms_p50": self.added * 1e3,
            "added_ms_ci": [v * 1e3 for v in self.added_ci[:2]] if self.added_ci else None,
            "cpu_ratio_p50": self.cpu_ratio,
            "cpu_ratio_ci": list(self.cpu_ratio_ci) if self.cpu_ratio_ci else None,
            "a_p50_ms": self.a_p50 * 1e3,
            "b_p50_ms": self.b_p50 * 1e3,
            "others_cores_p50": self.others_p50,
            "ratios": self.ratios,
            "others_cores": self.others,
        }


def summarize(comp: Comparison) -> Summary:
    ratios = [p.wall_ratio() for p in comp.pairs]
    added = [p.wall_added() for p in comp.pairs]
    cpus = [c for c in (p.cpu_ratio() for p in comp.pairs) if c is not None]
    cpus = cpus if len(cpus) == len(comp.pairs) else []
    busy = [p.others for p in comp.pairs if p.others is not None]
    return Summary(
        n=len(comp.pairs),
        ratio=statistics.median(ratios),
        ratio_ci=sign_test_ci(ratios),
        added=statistics.median(added),
        added_ci=sign_test_ci(added),
        cpu_ratio=statistics.median(cpus) if cpus else None,
        cpu_ratio_ci=sign_test_ci(cpus) if cpus else None,
        a_p50=statistics.median(r.wall for p in comp.pairs for r in p.a),
        b_p50=statistics.median(r.wall for p in comp.pairs for r in p.b),
        others_p50=statistics.median(busy) if busy else None,
        ratios=ratios,
        others=[p.others for p in comp.pairs],
    )


def _quantile(values: list[float], q: float) -> float:
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def block_bootstrap_ci(
    values: list[float], block: int = 4, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float] | None:
    """A moving-block bootstrap interval of the median of ``values`` (pair ratios, in run order).

    The sign test takes the pairs as independent; on a virtual machine whose CPU speed drifts over
    seconds, neighbouring pairs are not, and its interval can come out too narrow. Resampling runs
    of ``block`` consecutive pairs keeps that dependence. None with fewer than ``4 * block`` values.
    """
    n = len(values)
    if n < 4 * block:
        return None
    rng = random.Random(seed)
    starts = n - block + 1
    medians = []
    for _ in range(resamples):
        sample: list[float] = []
        while len(sample) < n:
            start = rng.randrange(starts)
            sample.extend(values[start : start + block])
        medians.append(statistics.median(sample[:n]))
    tail = (1 - level) / 2
    return _quantile(medians, tail), _quantile(medians, 1 - tail), level


def print_block_verdict(
    label: str, b: Summary, aa: Summary, limit: float, block: int = 4
) -> tuple[list[float] | None, list[float] | None]:
    """Print ``b``'s median again with :func:`block_bootstrap_ci` intervals (``b``'s and the A/A
    control's) and its verdict against ``limit``; return both intervals in per cent."""
    ci, aa_ci = block_bootstrap_ci(b.ratios, block), block_bootstrap_ci(aa.ratios, block)
    print(
        f"  {label}, the same median with a moving-block bootstrap CI ({block} neighbouring pairs "
        f"resampled together): {ci_text(ci, pct)} {verdict(b.ratio, ci, limit)}; A/A {ci_text(aa_ci, pct)}"
    )

    def in_pct(c: tuple[float, float, float] | None) -> list[float] | None:
        return [(v - 1) * 100 for v in c[:2]] if c else None

    return in_pct(ci), in_pct(aa_ci)


def low_quantile_ratio(
    comp: Comparison, q: float = 0.1, resamples: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float, float]]:
    """B's ``q``-quantile wall time over A's, over every run of every pair, with a bootstrap 95 %
    interval (pairs resampled whole, since a pair's runs share their load).

    Work running beside ours only ever adds time to a run, so an arm's fastest runs carry the
    least of it: their ratio is what B adds when neither was disturbed, where the median of pair
    ratios still carries how the load differed within each pair.
    """
    pairs = comp.pairs

    def ratio(sample: list[Pair]) -> float:
        a = [r.wall for p in sample for r in p.a]
        b = [r.wall for p in sample for r in p.b]
        return _quantile(b, q) / _quantile(a, q)

    rng = random.Random(seed)
    boot = sorted(ratio(rng.choices(pairs, k=len(pairs))) for _ in range(resamples))
    return ratio(pairs), (_quantile(boot, 0.025), _quantile(boot, 0.975), 0.95)


def ci_text(ci: tuple[float, float, float] | None, fmt: Callable[[float], str]) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "[n/a: too few pairs]"


def pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.2f} %"


def print_table(heading: str, comps: list[Comparison], baseline: str = "plain") -> dict[str, Summary]:
    """Print one row per comparison (B's and A's p50, median B/A with its CI, added ms, CPU B/A)."""
    sums = {c.name: summarize(c) for c in comps}
    n = next(iter(sums.values())).n
    print(f"\n## {heading}: {n} ABBA pairs per comparison vs {baseline}, 95 % sign-test CI")
    print(
        f"  {f'B (A = {baseline})':<28}{'B p50 ms':>10}{'A p50 ms':>10}{'B/A p50':>10}  {'CI':<22}"
        f"{'+ms p50':>9}{'others':>8}  {'server CPU B/A [CI]'}"
    )
    for name, sm in sums.items():
        cpu = f"{pct(sm.cpu_ratio)} {ci_text(sm.cpu_ratio_ci, pct)}" if sm.cpu_ratio is not None else "n/a"
        others = f"{sm.others_p50:.2f}" if sm.others_p50 is not None else "n/a"
        print(
            f"  {name:<28}{sm.b_p50 * 1e3:>10.3f}{sm.a_p50 * 1e3:>10.3f}{pct(sm.ratio):>10}  "
            f"{ci_text(sm.ratio_ci, pct):<22}{sm.added * 1e3:>+9.3f}{others:>8}  {cpu}"
        )
    print("  (others: cores the rest of the machine kept busy during a pair, median over the pairs)")
    return sums


def verdict(value: float, ci: tuple[float, float, float] | None, target: float) -> str:
    """MET when the whole interval is within ``target``, MISSED when all of it is beyond, else UNDECIDED."""
    if ci is None:
        return ("met" if value <= target else "missed") + " at the point estimate only (no CI: too few pairs)"
    if ci[1] <= target:
        return "MET (the whole CI is within the target)"
    if ci[0] > target:
        return "MISSED (the whole CI is beyond the target)"
    return "UNDECIDED (the CI straddles the target: run more pairs)"


def load_average() -> str:
    """The 1-minute load average and the number of cores, for the report."""
    try:
        one = Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "load n/a"
    return f"load {one} on {os.cpu_count()} cores"
