"""The e2e lanes of ``./dev test`` (tests/support/lanes.py), driven as xdist's controller drives them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("xdist", reason="pytest-xdist (the dev extra) runs ./dev test on workers")

from tests.support.lanes import E2E_ORDER, LaneScheduling

COLLECTION = [
    "tests/e2e/test_ui_browser.py::test_a",
    "tests/e2e/test_drill.py::test_a",
    "tests/e2e/test_drill.py::test_b",
    "tests/e2e/test_drill_celery.py::test_a[x]",
    "tests/e2e/test_watchdog.py::test_a",
    "tests/integration/store/test_store.py::test_a",
    "tests/integration/store/test_store.py::test_b",
    "tests/unit/test_cli.py::test_a",
    "tests/unit/test_config.py::test_a",
    "tests/unit/test_config.py::test_b",
]


class FakeNode:
    """What the scheduler uses of xdist's WorkerController: an id, test batches, a shutdown."""

    def __init__(self, index: int, assigned: list[tuple[str, str]]) -> None:
        self.gateway = SimpleNamespace(id=f"gw{index}")
        self.assigned = assigned  # (worker, module) in the order the scheduler sends them
        self.shutting_down = False
        self.ran: list[str] = []
        self.pending: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.assigned.append((self.gateway.id, COLLECTION[indexes[0]].split("::")[0]))
        self.pending.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def _start(workers: int) -> tuple[LaneScheduling, list[FakeNode], list[tuple[str, str]]]:
    """A scheduler with ``workers`` fake workers that collected COLLECTION, work sent; the
    (worker, module) pairs in the order the scheduler sends them."""
    config: Any = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True))
    config.getvalue = {"tx": ["popen"] * workers}.get
    sched = LaneScheduling(config)
    assigned: list[tuple[str, str]] = []
    nodes = [FakeNode(i, assigned) for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    return sched, nodes, assigned


def _drain(sched: LaneScheduling, nodes: list[FakeNode]) -> None:
    """Each worker finishes one test per round until none has any left."""
    while any(node.pending for node in nodes):
        for node in nodes:
            if node.pending:
                nodeid = COLLECTION[node.pending.pop(0)]
                node.ran.append(nodeid)
                sched.mark_test_complete(node, COLLECTION.index(nodeid))
    assert sched.tests_finished


def _run(workers: int) -> tuple[list[FakeNode], list[tuple[str, str]]]:
    """Schedule COLLECTION on ``workers`` fake workers until done; the workers and what was sent."""
    sched, nodes, assigned = _start(workers)
    _drain(sched, nodes)
    return nodes, assigned


def test_e2e_modules_run_only_on_the_e2e_lanes_longest_first() -> None:
    """With 4 workers, gw0 and gw1 take the e2e modules in E2E_ORDER; gw2 and gw3 never get one."""
    nodes, started = _run(4)
    e2e = [(worker, module) for worker, module in started if module.startswith("tests/e2e/")]
    assert {worker for worker, _ in e2e} <= {"gw0", "gw1"}
    assert [module.rsplit("/", 1)[1] for _, module in e2e] == sorted(
        (m.rsplit("/", 1)[1] for _, m in e2e), key=E2E_ORDER.index
    )
    assert sorted(nodeid for node in nodes for nodeid in node.ran) == sorted(COLLECTION)
    assert all(node.shutting_down for node in nodes)


def test_the_shared_lanes_start_on_the_rest_at_once() -> None:
    """gw2 and gw3 start with the first non-e2e modules; a module's tests stay on one worker."""
    nodes, started = _run(4)
    firsts = dict(reversed(started))
    assert not firsts["gw2"].startswith("tests/e2e/")
    assert not firsts["gw3"].startswith("tests/e2e/")
    for module in {nodeid.split("::")[0] for nodeid in COLLECTION}:
        assert len([node for node in nodes if any(n.startswith(module) for n in node.ran)]) == 1, module


def test_one_worker_runs_everything_e2e_first() -> None:
    """With one worker (``-n 1``) the e2e modules come first, then the rest."""
    (node,), _ = _run(1)
    assert sorted(node.ran) == sorted(COLLECTION)
    assert node.ran[0].startswith("tests/e2e/test_drill.py")


def test_a_worker_yields_the_cpu_to_the_e2e_lanes_once_it_runs_other_tests() -> None:
    """On a worker, a non-e2e test lowers the process's priority to the shared lanes'; an e2e one doesn't."""
    script = (
        "import os; os.environ['PYTEST_XDIST_WORKER'] = 'gw0';"
        "from tests.support.lanes import SHARED_LANE_NICENESS, yield_to_e2e;"
        "yield_to_e2e('tests/e2e/test_drill.py::test_x'); a = os.getpriority(os.PRIO_PROCESS, 0);"
        "yield_to_e2e('tests/unit/test_cli.py::test_y'); b = os.getpriority(os.PRIO_PROCESS, 0);"
        "print(a, b, SHARED_LANE_NICENESS)"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=repo)
    before, after, niceness = map(int, out.stdout.split())
    assert before == os.getpriority(os.PRIO_PROCESS, 0)
    assert after == max(niceness, before)


def test_a_test_that_ends_its_worker_is_not_run_again_and_its_lane_is_taken_over() -> None:
    """gw0 dies in the drill's first test: that test is reported once, the module's other test and
    the remaining e2e modules run on the worker xdist starts instead, which becomes an e2e lane."""
    sched, nodes, assigned = _start(3)
    gw0 = nodes[0]
    assert COLLECTION[gw0.pending[0]] == "tests/e2e/test_drill.py::test_a"

    assert sched.remove_node(gw0) == "tests/e2e/test_drill.py::test_a"  # it died running it
    replacement = FakeNode(3, assigned)
    sched.add_node(replacement)
    sched.add_node_collection(replacement, COLLECTION)
    sched.schedule()
    nodes = [*nodes[1:], replacement]
    _drain(sched, nodes)
    ran = [nodeid for node in nodes for nodeid in node.ran]
    assert "tests/e2e/test_drill.py::test_a" not in ran
    assert sorted(ran) == sorted(set(COLLECTION) - {"tests/e2e/test_drill.py::test_a"})
    e2e_workers = {w for w, module in assigned if module.startswith("tests/e2e/")}
    assert "gw2" not in e2e_workers  # still a shared lane
    assert "gw3" in e2e_workers  # gw0's lane, taken over
