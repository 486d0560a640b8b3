"""How ``./dev test`` spreads the suite over pytest-xdist workers: e2e lanes and shared lanes.

The e2e modules (``tests/e2e/``) take most of a serial run's wall time but little of its CPU: they
boot real Airflow components and wait on them. The unit and integration tests are the opposite.
So the first :data:`E2E_LANES` workers run the e2e modules, longest first, one module at a time
each, and only then join the others on the rest; every other worker (a shared lane) runs the rest
from the start.
At most :data:`E2E_LANES` Airflow stacks boot at once, whatever the worker count.

Units are whole modules, as ``--dist loadfile`` makes them: a module's fixtures (a drill run, a
booted api-server) are set up once, on one worker. See docs/packaging.md, "The test run".

A worker that dies (a test overran its time limit: tests/plugins/time_limit.py ends the process)
is replaced by xdist; the test it was running is reported failed once and not run again, the rest
of its module goes back to the queue, and the new worker takes over its lane.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from xdist.scheduler import LoadScopeScheduling

if TYPE_CHECKING:
    import pytest

__all__ = [
    "E2E_DIR",
    "E2E_LANES",
    "E2E_ORDER",
    "SHARED_LANE_NICENESS",
    "LaneScheduling",
    "worker_count",
    "yield_to_e2e",
]

E2E_DIR = "tests/e2e/"
#: Airflow stacks booted at once: two fit beside the shared lanes on 2 cores.
E2E_LANES = 2
#: The e2e modules, longest first (measured: ``--durations`` of a full run; docs/packaging.md);
#: modules not listed run after these.
E2E_ORDER = (
    "test_drill.py",
    "test_drill_celery.py",
    "test_drill_wedge.py",
    "test_watchdog.py",
    "test_stalled_triggerer.py",
    "test_alerting_dag.py",
    "test_ui_browser.py",
)
#: How much a worker lowers its CPU priority once it runs a module that is not e2e: the drills'
#: invariants hold only if their Airflow components get CPU when they need it (a kill must land in a
#: critical section, a reset must happen inside the plain phase's window), while the unit and
#: integration tests only need to finish. 5 gives the e2e lanes about three quarters of a contended
#: core; niceness is inherited, so the servers a shared lane starts yield as well.
SHARED_LANE_NICENESS = 5


def yield_to_e2e(nodeid: str) -> None:
    """On an xdist worker about to run ``nodeid`` outside ``tests/e2e/``, lower this process's CPU
    priority once (an e2e lane does so only when its e2e modules are done)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or nodeid.startswith(E2E_DIR):
        return
    if os.getpriority(os.PRIO_PROCESS, 0) < SHARED_LANE_NICENESS:
        os.setpriority(os.PRIO_PROCESS, 0, SHARED_LANE_NICENESS)


def _rank(scope: str) -> int:
    name = scope.rsplit("/", 1)[-1]
    return E2E_ORDER.index(name) if name in E2E_ORDER else len(E2E_ORDER)


def worker_count(config: pytest.Config) -> int:
    """Workers for ``-n auto``: none for a run naming tests (files, node ids, ``-k``); else one per
    CPU, or :data:`E2E_LANES` plus one per CPU but one when the marker expression may select the
    e2e tests."""
    from _pytest.mark.expression import Expression

    named = [arg for arg in config.args if arg.rstrip("/") not in config.getini("testpaths")]
    if named or config.option.keyword or config.option.collectonly:
        return 0
    cpus = len(os.sched_getaffinity(0))
    markexpr = config.option.markexpr
    e2e_marks = {"e2e", "slow"}  # what every e2e module carries (tests/e2e/*: pytestmark)
    if markexpr and not Expression.compile(markexpr).evaluate(lambda mark, **_: mark in e2e_marks):
        return cpus
    # One CPU is left to the e2e lanes' Airflow components: with a shared lane per CPU (4 workers
    # on 2 cores) the drills broke their own invariants under load (docs/packaging.md).
    return E2E_LANES + max(1, cpus - 1)


class LaneScheduling(LoadScopeScheduling):
    """Modules as units; e2e modules only on the first :data:`E2E_LANES` workers, longest first."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False  # keep collection order for the shared lanes
        self._e2e_lanes: set[Any] = set()
        self._lost_e2e_lanes = 0  # e2e lanes whose worker died; their replacements take them over

    def _split_scope(self, nodeid: str) -> str:
        return nodeid.split("::", 1)[0]

    def _is_e2e_lane(self, node: Any) -> bool:
        return node in self._e2e_lanes

    def add_node(self, node: Any) -> None:
        super().add_node(node)
        if int(node.gateway.id.removeprefix("gw")) < E2E_LANES:
            self._e2e_lanes.add(node)
        elif self._lost_e2e_lanes:  # a replacement worker (xdist numbers it after the others)
            self._lost_e2e_lanes -= 1
            self._e2e_lanes.add(node)

    def remove_node(self, node: Any) -> str | None:
        """Forget ``node``; if it died with tests pending, return the one it was running (xdist
        reports it failed) and queue the rest of its modules again, without that test: run again
        it would only end the next worker the same way."""
        workload = self.assigned_work.pop(node)
        lane = node in self._e2e_lanes
        self._e2e_lanes.discard(node)
        pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        crashed = pending[0]  # a worker runs its tests in the order they were sent
        self._lost_e2e_lanes += lane
        for scope, unit in workload.items():
            if crashed in unit:
                unit[crashed] = True
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _next_scope(self, node: Any) -> str | None:
        """The module ``node`` runs next: an e2e one on an e2e lane while any is left, else the
        first other one; None when nothing is left that it may run."""
        if self._is_e2e_lane(node):
            e2e = [s for s in self.workqueue if s.startswith(E2E_DIR)]
            if e2e:
                return min(e2e, key=_rank)
        return next((s for s in self.workqueue if not s.startswith(E2E_DIR)), None)

    def _assign_work_unit(self, node: Any) -> None:
        scope = self._next_scope(node)
        if scope is None:
            return
        self.workqueue.move_to_end(scope, last=False)  # the base class sends the queue's head
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if self._next_scope(node) is None:
            node.shutdown()  # it finishes what it holds, then exits
            return
        if self._pending_of(self.assigned_work[node]) > 2:
            return
        self._assign_work_unit(node)
