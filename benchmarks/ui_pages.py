"""How long the UI's pages take with 10,000 recorded attempts (5,000 slots, each run twice).

Seeds a store (embedded SQLite by default, ``--url postgresql://...`` for PostgreSQL) with one
crash's records written through the audit's own writer, then times each page and JSON route
in process (no network), as a viewer who may read every DAG, each cold (the classification
cache emptied first) and once warm. Target: every page under 1 s cold.

    python -m benchmarks.ui_pages [--attempts 10000] [--url URL] [--repeat 5]
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

ROUTES = ("/", "/duplicates", "/timeline", "/ledger", "/fences", "/api/duplicates", "/api/overview")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--url", help="store URL (default: a temp embedded SQLite file)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="crashsafe-bench-home-"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_crashsafe.store.store import open_store
    from airflow_crashsafe.ui import queries
    from airflow_crashsafe.ui.access import readable_dag_ids, ui_store
    from airflow_crashsafe.ui.app import create_app
    from airflow_crashsafe.ui.health import JobSpan, outages, scheduler_state
    from airflow_crashsafe.ui.models import ComponentHealth
    from tests.unit.ui.crash_records import seed_crash

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
    spans = [
        JobSpan(crash.first_scheduler_started, crash.killed_at),
        JobSpan(crash.restarted_at, datetime.now(timezone.utc)),
    ]

    class Scheduler:
        def health(self) -> Any:
            return True, [ComponentHealth(component="scheduler", status="healthy")]

        def outages(self, *, since: datetime, now: datetime) -> Any:
            return outages(spans, now=now, since=since, grace=crash.restarted_at - crash.restarted_at)

    app = create_app()
    app.dependency_overrides.update(
        {
            ui_store: lambda: store,
            get_user: lambda: SimpleAuthManagerUser(username="viewer", role="viewer"),
            readable_dag_ids: lambda: frozenset(dags),
            scheduler_state: Scheduler,
        }
    )
    params = {"/timeline": {"dag_id": "dag_00", "task_id": "load_0", "partition": crash.partitions[0]}}
    worst = 0.0
    with TestClient(app, root_path="/crashsafe") as client:
        for route in ROUTES:
            times = []
            for _ in range(args.repeat):
                queries.clear_cache()  # cold: every request classifies the attempts afresh
                t = time.perf_counter()
                response = client.get(route, params=params.get(route, {}))
                times.append(time.perf_counter() - t)
                assert response.status_code == 200, (route, response.status_code, response.text[:300])
            t = time.perf_counter()
            client.get(route, params=params.get(route, {}))
            warm = time.perf_counter() - t
            worst = max(worst, max(times))
            print(
                f"{route:18s} cold median {statistics.median(times) * 1000:7.1f} ms"
                f"  max {max(times) * 1000:7.1f} ms"
                f"   warm {warm * 1000:6.1f} ms"
            )
    print(f"worst {worst * 1000:.0f} ms: {'OK' if worst < 1 else 'OVER'} the 1 s budget")
    return 0 if worst < 1 else 1


if __name__ == "__main__":
    sys.exit(main())
