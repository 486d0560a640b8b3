"""The storm's warehouse on real PostgreSQL: loads above capacity slow down as modelled, the timeout fires."""

from __future__ import annotations

import threading
import time

import pytest

from drill.storm_warehouse import (
    LOADER_ROLE,
    TIMEOUT_MESSAGE,
    CapacityProbe,
    count_timeouts,
    install,
    loader_url,
    start_night,
)

pytestmark = pytest.mark.integration

psycopg = pytest.importorskip("psycopg")

STEP = 0.2


@pytest.fixture
def warehouse(postgres_url: str) -> str:
    """A fresh database with the storm's schema and a loader role whose statement timeout is 5 s."""
    install(postgres_url, statement_timeout=5.0)
    return postgres_url


def _loads(url: str, n: int, *, steps: int, capacity: int, warehouse: str = "w") -> list[float | str]:
    """Run ``n`` loads at once as the loader; each one's seconds, or its error's first line."""
    results: list[float | str] = [0.0] * n
    start = threading.Barrier(n)

    def one(i: int) -> None:
        with psycopg.connect(loader_url(url), autocommit=True) as conn:
            start.wait()
            began = time.monotonic()
            try:
                label = f"{warehouse}/load_{i}"
                args = (warehouse, label, steps, STEP, capacity)
                conn.execute("SELECT storm.load(%s, %s, %s, %s, %s)", args)
                results[i] = time.monotonic() - began
            except psycopg.Error as exc:
                results[i] = str(exc).splitlines()[0]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_loads_up_to_capacity_run_at_full_speed(warehouse: str) -> None:
    """Two loads on a capacity of two each take their steps times the step, no more."""
    took = _loads(warehouse, 2, steps=5, capacity=2)
    assert all(isinstance(t, float) and 0.9 <= t < 1.6 for t in took), took


def test_loads_above_capacity_slow_down_in_proportion(warehouse: str) -> None:
    """Six loads on a capacity of two each take about three times as long (active / C = 3)."""
    took = _loads(warehouse, 6, steps=5, capacity=2)
    assert all(isinstance(t, float) for t in took), took
    assert all(2.4 <= t < 3.9 for t in took if isinstance(t, float)), took  # 5 steps x 0.2 s x 3


def test_warehouses_do_not_slow_each_other(warehouse: str) -> None:
    """Loads of another warehouse do not count against this one's capacity."""
    busy = {"steps": 5, "capacity": 1, "warehouse": "x"}
    other = threading.Thread(target=_loads, args=(warehouse, 4), kwargs=busy)
    other.start()
    took = _loads(warehouse, 1, steps=5, capacity=1)
    other.join(60)
    assert isinstance(took[0], float), took
    assert took[0] < 1.6, took


def test_a_load_slowed_past_the_timeout_is_cancelled_by_the_server(warehouse: str) -> None:
    """Eight loads of 10 steps on a capacity of two would take 8 s each: the 5 s timeout cancels them."""
    took = _loads(warehouse, 8, steps=10, capacity=2)
    assert all(isinstance(t, str) and TIMEOUT_MESSAGE in t for t in took), took


def test_the_timeout_is_the_loader_roles_alone(warehouse: str) -> None:
    """The loader role carries the timeout; the admin connection does not."""
    with psycopg.connect(loader_url(warehouse), autocommit=True) as conn:
        row = conn.execute("SELECT current_user, current_setting('statement_timeout')").fetchone()
    assert row == (LOADER_ROLE, "5s")


def test_the_probe_sees_the_peak_above_capacity(warehouse: str) -> None:
    """The capacity probe records each warehouse's peak of active loads and time above C."""
    probe = CapacityProbe(warehouse, capacity=2, interval=0.05).start()
    try:
        _loads(warehouse, 4, steps=4, capacity=2)
    finally:
        probe.stop()
    assert probe.peak.get("w") == 4
    assert probe.above.get("w", 0.0) > 0.5
    assert probe.failed == 0


def test_start_night_sets_each_dags_first_arrival(warehouse: str) -> None:
    """Each DAG's night row says when its first source lands and how far apart the others do."""
    start_night(warehouse, ["a", "b"], 100.0, 6.0)
    start_night(warehouse, ["a"], 200.0, 3.0)
    with psycopg.connect(warehouse, autocommit=True) as conn:
        sql = "SELECT dag_id, first_arrival, arrival_interval FROM storm.night ORDER BY 1"
        rows = conn.execute(sql).fetchall()
    assert rows == [("a", 200.0, 3.0), ("b", 100.0, 6.0)]


def test_count_timeouts_reads_the_label_from_the_log_prefix() -> None:
    """Only statement timeouts of labelled backends count, per warehouse and task."""
    app = "app=crashsafe-work:storm_plain_lost"
    log = "\n".join(
        [
            f"2026-01-01 00:00:00.000 UTC [1] {app}/load_03 ERROR:  {TIMEOUT_MESSAGE}",
            f"2026-01-01 00:00:01.000 UTC [2] {app}/load_04 ERROR:  {TIMEOUT_MESSAGE}",
            f"2026-01-01 00:00:02.000 UTC [3] {app}/load_05 FATAL:  terminating connection",
            f"2026-01-01 00:00:03.000 UTC [4] app=psql ERROR:  {TIMEOUT_MESSAGE}",
        ]
    )
    assert count_timeouts(log) == {"storm_plain_lost": ["load_03", "load_04"]}
