"""The crash drill on a two-host Celery fleet: a lost worker host and a partitioned zombie.

``python -m drill --executor celery`` boots redis-server, two schedulers, the triggerer, the
api-server, the dag-processor and two Celery workers, each in its own UTS and PID namespaces
(hostnames worker-a and worker-b). Scenario (c) SIGKILLs worker-b's namespace mid-load; scenario
(d) blackholes worker-b's route to the execution API past the task heartbeat timeout (20 s) while
it still reaches the warehouse, then heals it. In both the tasks that ran on worker-b are retried
on worker-a. Plain operators double-count and pay twice; crashsafe stays exact, and in (d) the
zombie's overlap is measured and its late write refused by the fence. Needs root, unshare and
redis-server; 4.5 to 6.5 minutes on 2 shared cores.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from drill.cluster import find_pg_bin
from drill.facts import DrillFacts
from drill.fleet import HOST_A, HOST_B
from drill.hosts import unshare_available
from drill.redis_broker import find_redis_server
from drill.subprocess_run import left_behind, run_fleet_drill

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

# One region and one payment per vendor: per DAG one load and two pushes on worker-b, one load on
# worker-a. The scenarios' own work lengths and the 5 s adoption timeout make (c) adopt and (d)
# take over from its zombie.
SHORT_FLEET = [*("--regions", "1", "--payments", "1", "--kill-after", "3", "--watch-interval", "0")]
LOADS = ("load_revenue_", "merge_revenue_")

Run = tuple[subprocess.CompletedProcess[str], dict[str, DrillFacts]]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Run the default Celery drill (scenarios lost-worker and partition) once for the module."""
    missing = [
        why
        for why in (
            None if find_pg_bin() else "PostgreSQL binaries",
            unshare_available(),
            None if find_redis_server() else "redis-server",
        )
        if why
    ]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs for the Celery drill: {', '.join(missing)}", pytrace=False)
        pytest.skip(f"the Celery drill needs: {', '.join(missing)}")
    return run_fleet_drill(SHORT_FLEET, tmp_path_factory.mktemp("fleet"), timeout=840)


def test_drill_exits_zero_with_both_reports(fleet: Run) -> None:
    """Every crashsafe invariant held in both scenarios and each printed its report."""
    done, facts = fleet
    assert done.returncode == 0, done.stdout
    assert set(facts) == {"lost-worker", "partition"}
    for phase in (
        "Celery workers answering: worker-a, worker-b",
        "SIGKILL host worker-b",
        "partition healed after",
        "Fleet drill (c) lost-worker",
        "Fleet drill (d) partition",
        "cleanup done: no process left",
    ):
        assert phase in done.stdout


@pytest.mark.parametrize("scenario", ["lost-worker", "partition"])
def test_plain_double_counts_and_pays_twice(fleet: Run, scenario: str) -> None:
    """Plain operators: the load retried on worker-a committed a second copy; both vendors booked twice."""
    dag = fleet[1][scenario].plain
    assert dag is not None
    wh = dag.warehouse
    assert wh.revenue_actual == pytest.approx(2 * wh.revenue_expected)
    assert wh.fact_rows == 2 * wh.orders
    assert all(p.booked == 2 for p in fleet[1][scenario].payments["plain"])


@pytest.mark.parametrize("scenario", ["lost-worker", "partition"])
def test_crashsafe_exact_and_pays_once(fleet: Run, scenario: str) -> None:
    """Crashsafe: revenue exact, every row once, newest attempt committed every fence, no payment twice."""
    facts = fleet[1][scenario]
    dag = facts.crashsafe
    assert dag is not None
    wh = dag.warehouse
    assert wh.revenue_actual == pytest.approx(wh.revenue_expected)
    assert wh.revenue_reported == [pytest.approx(wh.revenue_expected)]
    assert wh.fact_rows == wh.fact_keys == wh.orders
    assert wh.line_rows == wh.line_keys == wh.orders
    assert dag.fences
    assert all(f.committed_try == f.issued_try for f in dag.fences)
    assert all(p.booked <= p.intended for p in facts.payments["crashsafe"])


@pytest.mark.parametrize("scenario", ["lost-worker", "partition"])
def test_faulted_tasks_ran_on_two_hosts(fleet: Run, scenario: str) -> None:
    """Each task worker-b held was attempted on worker-b, then on worker-a; the audit saw both hosts."""
    facts = fleet[1][scenario]
    assert facts.fleet is not None
    for side in ("plain", "crashsafe"):
        hit = facts.fleet.faulted_tasks[side]
        assert len(hit) == 3, hit
        dag = facts.dag(side)
        assert dag is not None
        by_id = {t.task_id: t for t in dag.tasks}
        for task_id in hit:
            hosts = [a.hostname for a in by_id[task_id].attempts]
            assert hosts[0] == HOST_B, (task_id, hosts)
            assert HOST_A in hosts[1:], (task_id, hosts)
        audited = {a.task_id: a for a in facts.audit[side]}
        for task_id in hit:
            assert {p.split()[0] for p in audited[task_id].processes} == {HOST_A, HOST_B}


def test_a_lost_hosts_reruns_are_crash_reruns_not_low_risk_retries(fleet: Run) -> None:
    """(c): the audit rates each task retried after worker-b was lost a reset re-run, never a plain retry."""
    facts = fleet[1]["lost-worker"]
    assert facts.fleet is not None
    for side in ("plain", "crashsafe"):
        hit = set(facts.fleet.faulted_tasks[side])
        audited = [a for a in facts.audit[side] if a.task_id in hit]
        assert {a.task_id for a in audited} == hit
        for audit in audited:
            assert "reset_rerun" in audit.kinds, (audit.task_id, audit.kinds)
            assert "retry_after_failure" not in audit.kinds, (audit.task_id, audit.kinds)
        if side == "plain":
            assert all(a.risk in ("high", "critical") for a in audited), audited


def test_partition_zombie_overlapped_and_was_fenced_out(fleet: Run) -> None:
    """(d): the partitioned zombie ran on after its successor began; its late write was refused."""
    facts = fleet[1]["partition"]
    dag = facts.crashsafe
    assert dag is not None
    assert dag.fences is not None
    loads = [a for a in facts.audit["crashsafe"] if a.task_id.startswith(LOADS)]
    assert loads
    assert all(a.overlap_seconds > 0 and "overlap" in a.kinds for a in loads), loads
    assert all(a.protection == "fenced" and not a.harmful for a in loads)
    assert sum(f.rejected_count for f in dag.fences if f.task_id.startswith(LOADS)) >= 1, dag.fences


def test_cleanup_left_no_process(fleet: Run) -> None:
    """No process of any session the drill started survives it, namespaced workers included."""
    for facts in fleet[1].values():
        assert facts.sessions
        assert left_behind(facts.sessions) == []
