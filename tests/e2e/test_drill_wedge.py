"""The wedge drill against real Airflow 3.3: a scheduler killed in its critical section wedges its successor.

Boots api-server, scheduler, dag-processor and triggerer (LocalExecutor, PostgreSQL metadata DB)
with 8 waiting tasks, SIGKILLs the scheduler while its session holds the pool lock, restarts it
15 s later (past a 10 s health-check threshold), watches the reset tasks stay ``scheduled`` for
30 s, then starts the healing watchdog. About 3 to 4 minutes on 2 cores. The heal is the real
proof at work: the orphaned session carries the identity Airflow's own scheduler process set
through the plugin (its job, the killed pid), and only that lets ``--heal`` end it.
"""

from __future__ import annotations

import subprocess

import pytest

from drill.cluster import find_pg_bin
from drill.facts import DrillFacts
from drill.subprocess_run import run_drill
from drill.wedge_report import carries_identity

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

# 8 tasks wait 60 s: they outlive the kill, the 15 s outage and the restart's start-up, so the
# restarted scheduler resets them all; the plain phase gives up after 30 s.
SHORT_WEDGE = [
    *("--scenario", "wedge", "--wedge-tasks", "8", "--work-seconds", "60", "--give-up", "30"),
    *("--health-check-threshold", "10", "--outage", "15", "--watch-interval", "2", "--watch-threshold", "10"),
]


@pytest.fixture(scope="module")
def wedge_drill(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], DrillFacts]:
    """Run one short wedge drill for the whole module."""
    if find_pg_bin() is None:
        pytest.skip("no PostgreSQL binaries for the drill's metadata DB")
    return run_drill(SHORT_WEDGE, tmp_path_factory.mktemp("wedge"), timeout=560)


def test_plain_restart_stays_wedged(wedge_drill: tuple[subprocess.CompletedProcess[str], DrillFacts]) -> None:
    """The kill left the session open holding the pool lock; every reset task stayed scheduled."""
    _, facts = wedge_drill
    w = facts.wedge
    assert w is not None
    assert w.landed
    assert "RowShareLock on slot_pool" in w.locks
    assert w.socket_holders > 0
    assert w.wedged
    assert w.stuck == 8


def test_the_dead_schedulers_session_carries_its_identity(
    wedge_drill: tuple[subprocess.CompletedProcess[str], DrillFacts],
) -> None:
    """The plugin, loaded by Airflow's own scheduler, named the session after the killed process's job."""
    _, facts = wedge_drill
    w = facts.wedge
    assert w is not None
    assert w.backend_application.startswith("airflow-scheduler job="), w.backend_application
    assert carries_identity(w), (w.backend_application, w.scheduler_pid)


def test_healing_watchdog_pages_and_the_run_finishes(
    wedge_drill: tuple[subprocess.CompletedProcess[str], DrillFacts],
) -> None:
    """With watch --heal: a page naming the open transaction, the tasks queued, the run done, exit 0."""
    done, facts = wedge_drill
    w = facts.wedge
    assert w is not None
    assert w.page_at is not None, done.stdout[-4000:]  # the drill's progress says what the watchdog did
    assert "open transaction" in w.page_summary.lower()
    assert w.page_key.startswith("scheduler_wedged:"), w.page_key
    assert w.backend_gone_at is not None
    assert w.recovered_at is not None
    assert w.run_state == "success"
    assert done.returncode == 0, done.stdout
    assert "cleanup done: no process left" in done.stdout
