"""How long the UI's pages take with 10,000 recorded attempts (5,000 slots, each run twice).

Seeds a store (embedded SQLite by default, ``--url postgresql://...`` for PostgreSQL) with one
crash's records written through the audit's own code, then times each page and JSON route in
process (no network), as a viewer who may read every DAG:

* catch-up: the first request after the whole crash was written, nothing classified yet (it
  spends at most the refresh budget and says how many task instances are still pending);
* cold: a new app, template cache and store connection for every request, with 20 task
  instances changed since the last request (the digest reclassifies those first);
* warm: the same request again.

Target: every page under 1 s, cold and catch-up included.

``--fence-events 200000`` also records that many fence events (fenced out and skipped committed,
spread over the DAGs, plus as many committed writes): the overview and the fence list count,
order and limit them in SQL. Then the fence routes are timed again on a new app with the digest
current (what the events cost, apart from catching the digest up). Target: under 0.5 s.

    python -m benchmarks.ui_pages [--attempts 10000] [--fence-events 0] [--url URL] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from typing import Any

ROUTES = (
    "/",
    "/duplicates",
    "/timeline",
    "/ledger",
    "/fences",
    "/api/duplicates",
    "/api/overview",
    "/api/fences",
)
#: The pages that list or count fence events, and their budget with ``--fence-events``.
FENCE_ROUTES = ("/", "/fences", "/api/fences", "/api/overview")
FENCE_BUDGET_SECONDS = 0.5


def seed_fence_events(store: Any, dags: list[str], count: int) -> None:
    """``count`` fence events over ``dags`` (newest last), and as many committed writes beside them."""
    import json

    from airflow_crashsafe.store import events

    kinds = ("fenced_out", "skipped_committed", "committed", "committed")
    batch: list[dict[str, Any]] = []
    with store.transaction() as db:
        for i in range(count * 2):
            batch.append(
                {
                    "kind": kinds[i % 4],
                    "dag_id": dags[(i // 4) % len(dags)],
                    "task_id": f"load_{i % 7}",
                    "map_index": -1,
                    "slot_partition": f"2026-01-{i % 28 + 1:02d}",
                    "target": "warehouse.facts",
                    "run_id": f"scheduled__{i}",
                    "try_number": 1,
                    "ti_id": f"ti-{i}",
                    "clear_number": 0,
                    "hostname": "worker-1",
                    "pid": 100 + i % 50,
                    "token": i,
                    "detail": json.dumps({"newest_token": i + 1}),
                }
            )
            if len(batch) == 10_000:
                events.record_many(db, batch)
                batch = []
        events.record_many(db, batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--url", help="store URL (default: a temp embedded SQLite file)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fence-events", type=int, default=0, help="fence events to record as well")
    args = parser.parse_args(argv)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="crashsafe-bench-home-"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_crashsafe.audit import digest
    from airflow_crashsafe.store import dirty
    from airflow_crashsafe.store.store import open_store
    from airflow_crashsafe.ui import render
    from airflow_crashsafe.ui.access import readable_dag_ids, ui_store, xcom_readable_dag_ids
    from airflow_crashsafe.ui.app import create_app
    from airflow_crashsafe.ui.health import JobSpan, outages, scheduler_state
    from airflow_crashsafe.ui.models import ComponentHealth
    from benchmarks.crash_records import seed_crash

    store = open_store(args.url or f"sqlite:///{tempfile.mkdtemp(prefix='crashsafe-bench-')}/store.db")
    store.migrate()
    dags = [f"dag_{i:02d}" for i in range(20)]
    tasks = max(1, args.attempts // 2 // len(dags) // 5)
    started = time.perf_counter()
    crash = seed_crash(store, dags, tasks=tasks, partitions=5)
    seeded = len(dags) * tasks * 5 * 2
    print(
        f"seeded {seeded} attempts ({seeded // 2} slots, {len(dags)} DAGs)"
        f" in {time.perf_counter() - started:.1f} s"
    )
    if args.fence_events:
        started = time.perf_counter()
        seed_fence_events(store, dags, args.fence_events)
        print(f"seeded {args.fence_events} fence events in {time.perf_counter() - started:.1f} s")
    spans = [
        JobSpan(crash.first_scheduler_started, crash.killed_at),
        JobSpan(crash.restarted_at, datetime.now(timezone.utc)),
    ]

    class Scheduler:
        def health(self) -> Any:
            return True, [ComponentHealth(component="scheduler", status="healthy")]

        def outages(self, *, since: datetime, now: datetime) -> Any:
            return outages(spans, now=now, since=since, grace=crash.restarted_at - crash.restarted_at)

    overrides: dict[Any, Any] = {
        ui_store: lambda: store,
        get_user: lambda: SimpleAuthManagerUser(username="viewer", role="viewer"),
        readable_dag_ids: lambda: frozenset(dags),
        xcom_readable_dag_ids: lambda: frozenset(dags),
        scheduler_state: Scheduler,
    }
    params = {"/timeline": {"dag_id": "dag_00", "task_id": "load_0", "partition": crash.partitions[0]}}

    def fresh_client() -> TestClient:
        """A new app, template cache and store connection: the api-server's first request."""
        render.reset_templates()
        store.close()
        app = create_app()
        app.dependency_overrides.update(overrides)
        return TestClient(app, root_path="/crashsafe")

    def change_some_attempts(n: int) -> None:
        """Mark n task instances changed (as their writes do): the digest reclassifies them first."""
        with store.transaction() as db:
            for i in range(n):
                run_id = f"scheduled__{crash.partitions[i % len(crash.partitions)]}"
                task = {"dag_id": dags[i % len(dags)], "task_id": f"load_{i % tasks}", "map_index": -1}
                dirty.mark(db, {**task, "run_id": run_id})

    worst = 0.0
    fence_worst = 0.0
    with fresh_client() as client:
        t = time.perf_counter()
        response = client.get("/duplicates")
        catch_up = time.perf_counter() - t
        assert response.status_code == 200, response.text[:300]
    pending = digest.refresh(store, budget_seconds=0, chunk=1).pending
    print(f"{'catch-up /duplicates':22s} {catch_up * 1000:7.1f} ms  ({pending} task instances still pending)")
    worst = max(worst, catch_up)
    t = time.perf_counter()
    digest.refresh(store)
    print(f"rest of the catch-up (later requests or `audit reconcile`): {time.perf_counter() - t:.2f} s")
    for route in ROUTES:
        times = []
        for _ in range(args.repeat):
            change_some_attempts(20)
            with fresh_client() as client:
                t = time.perf_counter()
                response = client.get(route, params=params.get(route, {}))
                times.append(time.perf_counter() - t)
                assert response.status_code == 200, (route, response.status_code, response.text[:300])
                t = time.perf_counter()
                client.get(route, params=params.get(route, {}))
                warm = time.perf_counter() - t
        worst = max(worst, max(times))
        print(
            f"{route:22s} cold median {statistics.median(times) * 1000:7.1f} ms"
            f"  max {max(times) * 1000:7.1f} ms"
            f"   warm {warm * 1000:6.1f} ms"
        )
    print(f"worst {worst * 1000:.0f} ms: {'OK' if worst < 1 else 'OVER'} the 1 s budget")
    if args.fence_events:
        # What the fence events themselves cost: a new app each time, the digest already current.
        digest.refresh(store)
        for route in FENCE_ROUTES:
            times = []
            for _ in range(args.repeat):
                with fresh_client() as client:
                    t = time.perf_counter()
                    response = client.get(route)
                    times.append(time.perf_counter() - t)
                    assert response.status_code == 200, (route, response.status_code, response.text[:300])
            fence_worst = max(fence_worst, max(times))
            print(f"{route:22s} fence events, cold median {statistics.median(times) * 1000:7.1f} ms")
    fences_ok = not args.fence_events or fence_worst < FENCE_BUDGET_SECONDS
    if args.fence_events:
        verdict = "OK" if fences_ok else "OVER"
        print(
            f"fence pages with {args.fence_events} fence events: worst {fence_worst * 1000:.0f} ms, "
            f"{verdict} the {FENCE_BUDGET_SECONDS:g} s budget"
        )
    return 0 if worst < 1 and fences_ok else 1


if __name__ == "__main__":
    sys.exit(main())
