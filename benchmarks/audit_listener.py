"""Listener cost per event on PostgreSQL: ``python benchmarks/audit_listener.py [--url URL] [-n N]``.

Drives the real hooks with a Task SDK ``RuntimeTaskInstance``; each call returns only after the
event is stored (or spooled), so the figure is what a task pays per start or end. Runs in a
scratch database created on the server and dropped afterwards. Target: p50 <= 10 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="crashsafe-bench-"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--url",
        default=os.environ.get(
            "CRASHSAFE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5433/postgres"
        ),
    )
    parser.add_argument("-n", type=int, default=500, help="attempts (2 events each)")
    args = parser.parse_args()

    import psycopg
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    from airflow_crashsafe.audit import listener
    from airflow_crashsafe.audit.spool import Spool
    from airflow_crashsafe.audit.writer import Writer
    from airflow_crashsafe.store.attempts import AttemptLog
    from airflow_crashsafe.store.dbapi import connect_url
    from airflow_crashsafe.store.store import Store

    name = f"crashsafe_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = args.url.rsplit("/", 1)[0] + "/" + name
    store = Store(lambda: connect_url(url), location=url)
    store.migrate()

    writer = Writer(AttemptLog(store), Spool(os.path.join(os.environ["AIRFLOW_HOME"], "spool")), timeout=0.5)
    listener.set_writer(writer)
    dag_run = SimpleNamespace(
        run_id="bench", logical_date=datetime(2026, 1, 1, tzinfo=timezone.utc), clear_number=0
    )
    costs: list[float] = []
    try:
        for i in range(args.n):
            ti = RuntimeTaskInstance.model_construct(
                id=uuid.uuid4(),
                task_id=f"t{i % 50}",
                dag_id="bench",
                run_id=f"run{i // 50}",
                try_number=1,
                map_index=-1,
                start_date=datetime.now(timezone.utc),
                task=None,
                dag_version_id=uuid.uuid4(),
            )
            object.__setattr__(ti, "get_template_context", lambda: {"dag_run": dag_run})
            for hook in (listener.on_task_instance_running, listener.on_task_instance_success):
                began = time.perf_counter()
                hook(previous_state=None, task_instance=ti)
                costs.append((time.perf_counter() - began) * 1000)
        costs = costs[20:]  # first connection and migration check
        qs = statistics.quantiles(costs, n=100)
        print(
            f"audit listener on PostgreSQL: {len(costs)} events, p50 {statistics.median(costs):.2f} ms, "
            f"p95 {qs[94]:.2f} ms, p99 {qs[98]:.2f} ms, spooled {writer.spooled}"
        )
    finally:
        store.close()
        with psycopg.connect(args.url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
