"""How long the UI's Runs at risk page takes with a 1,000-task run running and its history.

One command, not part of the test suite (about a minute)::

    python -m benchmarks.ui_runs_at_risk [--tasks 1000] [--history 10] [--other-dags 20] [--repeat 5]

Builds a SQLite metadata database with Airflow 3.3.2's own schema (its models' ``create_all``):
DAG ``big``, a layered DAG of ``--tasks`` tasks (as :mod:`benchmarks.deadline_forecast` builds it)
serialized as Airflow stores it, ``--history`` past successful runs of every task, one run with
every task instance running, a ``[[deadlines]]`` entry and an Airflow ``deadline`` row on that
run; plus ``--other-dags`` DAGs of 50 tasks with the same history and a running run each (rows
the page's queries must not drag in). Then times ``/runs-at-risk`` and ``/api/runs-at-risk`` in
process (no network), as a viewer who may read every DAG: cold (a new app and template cache)
and warm. Target: at most 0.5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from benchmarks.deadline_forecast import layered_dag

ROUTES = ("/runs-at-risk", "/api/runs-at-risk")
BUDGET_SECONDS = 0.5


def seed(engine: Any, dag_id: str, graph: dict[str, list[str]], history: int, now: datetime) -> int:
    """The DAG's serialized row, its past runs, its running run (returns that run's id)."""
    from airflow.models.base import Base

    tables = Base.metadata.tables
    rng = random.Random(dag_id)
    tasks = [
        {"__type": "operator", "__var": {"task_id": t, "downstream_task_ids": d}} for t, d in graph.items()
    ]
    with engine.begin() as conn:
        conn.execute(
            tables["serialized_dag"].insert(),
            {
                "id": uuid.uuid4(),
                "dag_id": dag_id,
                "created_at": now,
                "last_updated": now,
                "dag_hash": "0" * 32,
                "dag_version_id": uuid.uuid4(),
                "data": {"__version": 3, "dag": {"dag_id": dag_id, "tasks": tasks}},
            },
        )
        runs = [(f"scheduled__{n}", now - timedelta(days=n + 1), "success") for n in range(history)]
        runs.append(("scheduled__now", now - timedelta(hours=1), "running"))
        running_id = 0
        for run_id, after, state in runs:
            result = conn.execute(
                tables["dag_run"].insert(),
                {
                    "dag_id": dag_id,
                    "run_id": run_id,
                    "run_type": "scheduled",
                    "state": state,
                    "run_after": after,
                    "logical_date": after,
                    "start_date": after,
                    "clear_number": 0,
                },
            )
            running_id = int(result.inserted_primary_key[0])
            rows = []
            for task in graph:
                done = state == "success"
                start = after if done else now - timedelta(seconds=rng.uniform(0, 300))
                duration = rng.uniform(30, 600) if done else None
                rows.append(
                    {
                        "id": uuid.uuid4(),
                        "dag_id": dag_id,
                        "run_id": run_id,
                        "task_id": task,
                        "map_index": -1,
                        "try_number": 1,
                        "max_tries": 0,
                        "pool": "default_pool",
                        "pool_slots": 1,
                        "state": state,
                        "start_date": start,
                        "end_date": start + timedelta(seconds=duration) if duration else None,
                        "duration": duration,
                    }
                )
            conn.execute(tables["task_instance"].insert(), rows)
    return running_id


def airflow_deadline(engine: Any, run_pk: int, at: datetime, now: datetime) -> None:
    """A DeadlineAlert's ``deadline`` row on the run, as Airflow writes it when the run is created."""
    from airflow.models.base import Base

    tables, alert = Base.metadata.tables, uuid.uuid4()
    with engine.begin() as conn:
        conn.execute(
            tables["deadline_alert"].insert(),
            {
                "id": alert,
                "created_at": now,
                "serialized_dag_id": uuid.uuid4(),
                "name": "big_sla",
                "reference": {"reference_type": "DagRunQueuedAtDeadline"},
                "interval": 7200.0,
                "callback_def": {},
            },
        )
        conn.execute(
            tables["deadline"].insert(),
            {
                "id": uuid.uuid4(),
                "created_at": now,
                "last_updated_at": now,
                "dagrun_id": run_pk,
                "deadline_time": at,
                "missed": False,
                "callback_id": uuid.uuid4(),
                "deadline_alert_id": alert,
            },
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of DAG big, all running")
    parser.add_argument("--history", type=int, default=10, help="past successful runs per DAG")
    parser.add_argument("--other-dags", type=int, default=20, help="other DAGs of 50 tasks")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="crashsafe-bench-risk-"))
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from airflow_crashsafe.ui import render
    from airflow_crashsafe.ui.access import readable_dag_ids, ui_store, xcom_readable_dag_ids
    from airflow_crashsafe.ui.app import create_app
    from airflow_crashsafe.ui.metadata import metadata_session

    import_all_models()
    engine = create_engine(f"sqlite:///{home / 'airflow.db'}")
    Base.metadata.create_all(engine)
    now = datetime.now(timezone.utc)
    rng = random.Random(7)
    started = time.perf_counter()
    big = seed(engine, "big", layered_dag(args.tasks, rng), args.history, now)
    airflow_deadline(engine, big, now + timedelta(hours=2), now)
    others = [f"other_{i:02d}" for i in range(args.other_dags)]
    for dag_id in others:
        seed(engine, dag_id, layered_dag(50, rng), args.history, now)
    total = (args.tasks + 50 * args.other_dags) * (args.history + 1)
    print(
        f"seeded {total} task instances ({args.tasks} of big running)"
        f" in {time.perf_counter() - started:.1f} s"
    )
    rules = home / "watchdog.toml"
    at = (now + timedelta(hours=1)).strftime("%H:%M")
    rules.write_text(f'[[deadlines]]\nname = "big_daily"\ndag_id = "big"\nat = "{at}"\n')
    os.environ["AIRFLOW__CRASHSAFE__DEADLINES_CONFIG"] = str(rules)
    dags = frozenset(["big", *others])

    def session() -> Any:
        with Session(engine) as s:
            yield s

    overrides: dict[Any, Any] = {
        ui_store: lambda: None,
        get_user: lambda: SimpleAuthManagerUser(username="viewer", role="viewer"),
        readable_dag_ids: lambda: dags,
        xcom_readable_dag_ids: lambda: dags,
        metadata_session: session,
    }

    def fresh_client() -> TestClient:
        render.reset_templates()
        app = create_app()
        app.dependency_overrides.update(overrides)
        return TestClient(app, root_path="/crashsafe")

    worst = 0.0
    for route in ROUTES:
        cold, warm = [], []
        for _ in range(args.repeat):
            with fresh_client() as client:
                for samples in (cold, warm):
                    t = time.perf_counter()
                    response = client.get(route)
                    samples.append(time.perf_counter() - t)
                    assert response.status_code == 200, (route, response.status_code, response.text[:300])
        if route.startswith("/api"):
            body = response.json()
            shown = [(i["deadline"], i["state"], len(i["critical_path"])) for i in body["items"]]
            print(f"  {body['total']} runs at risk: {json.dumps(shown)}")
        worst = max(worst, statistics.median(cold))
        print(
            f"{route:22s} cold median {statistics.median(cold) * 1000:7.1f} ms"
            f"  max {max(cold) * 1000:7.1f} ms"
            f"   warm median {statistics.median(warm) * 1000:7.1f} ms"
        )
    verdict = "OK" if worst <= BUDGET_SECONDS else "OVER"
    print(f"worst cold median {worst * 1000:.0f} ms: {verdict} the {BUDGET_SECONDS:g} s budget")
    return 0 if worst <= BUDGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
