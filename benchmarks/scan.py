"""How long ``airflow-crashsafe scan`` takes on a big DAG folder, against Airflow's own parse of it.

Usage: ``python -m benchmarks.scan [--dags 300] [--tasks-per-dag 10] [--rounds 2] [--json PATH]
[--quick]``. Generates a folder of DAG files (SQL operators with templated and parameterised SQL,
HTTP operators, TaskFlow tasks calling requests / hooks, pure tasks, shell commands, a mapped
task) and times, each in a fresh process, alternating: the baseline, Airflow's ``DagBag`` loading
the folder in one process (what the dag-processor pays anyway), and the full scan as it runs by
default: each file imported and judged in a worker process with a time limit, one worker per CPU.
Target: the scan of 300 DAGs / 3,000 tasks within 60 s on 2 cores; the ratio to the baseline says
what the scan adds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_crashsafe.scan.isolation import default_workers

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 60.0

HEADER = """from datetime import datetime

import requests
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.http.operators.http import HttpOperator
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task

with DAG("bench_{n:04d}", schedule="@daily", start_date=datetime(2024, 1, 1), catchup=False):
"""

TASKS = [
    """    SQLExecuteQueryOperator(task_id="append_{i}", conn_id="postgres_dwh",
        sql="INSERT INTO mart.t{i} SELECT * FROM staging.t{i} WHERE day = '{{{{ ds }}}}'")
""",
    """    SQLExecuteQueryOperator(task_id="upsert_{i}", conn_id="postgres_dwh",
        sql="INSERT INTO mart.u{i} (k, v) SELECT k, v FROM staging.u{i} WHERE day = %(day)s "
        "ON CONFLICT (k) DO UPDATE SET v = excluded.v", parameters={{"day": "{{{{ ds }}}}"}})
""",
    """    SQLExecuteQueryOperator(task_id="overwrite_{i}", conn_id="postgres_dwh", sql=[
        "DELETE FROM mart.o{i} WHERE day = %(day)s",
        "INSERT INTO mart.o{i} SELECT * FROM staging.o{i} WHERE day = %(day)s"],
        parameters={{"day": "{{{{ ds }}}}"}})
""",
    """    HttpOperator(task_id="post_{i}", http_conn_id="api", endpoint="/items/{i}", method="POST",
        data="{{}}")
""",
    """    HttpOperator(task_id="get_{i}", http_conn_id="api", endpoint="/items/{i}", method="GET")
""",
    """    @task(task_id="push_{i}")
    def push_{i}(ds=None):
        requests.post("https://api.example.com/push", json={{"day": ds}}, timeout=10)

    push_{i}()
""",
    """    @task(task_id="load_{i}")
    def load_{i}(ds=None):
        hook = PostgresHook(postgres_conn_id="postgres_dwh")
        hook.run(f"DELETE FROM mart.l{i} WHERE day = '{{ds}}'")
        hook.run(f"INSERT INTO mart.l{i} SELECT * FROM staging.l{i} WHERE day = '{{ds}}'")

    load_{i}()
""",
    """    @task(task_id="pure_{i}")
    def pure_{i}(rows: list | None = None) -> int:
        return sum(r * 2 for r in rows or [])

    pure_{i}()
""",
    """    BashOperator(task_id="bash_{i}", bash_command="echo {{{{ ds }}}} && sleep 1")
""",
    """    SQLExecuteQueryOperator.partial(task_id="mapped_{i}", conn_id="postgres_dwh").expand(
        sql=["SELECT 1", "SELECT 2"])
""",
]


def generate(folder: Path, dags: int, per_dag: int) -> int:
    """Write ``dags`` files of ``per_dag`` tasks each; returns the number of tasks."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(dags):
        body = "".join(TASKS[(n + i) % len(TASKS)].format(i=i) for i in range(per_dag))
        (folder / f"bench_{n:04d}.py").write_text(HEADER.format(n=n) + body)
    return dags * per_dag


BASELINE = (
    "import sys, warnings; warnings.simplefilter('ignore');"
    "from airflow.dag_processing.dagbag import DagBag; sys.path.append(sys.argv[1]);"
    "b = DagBag(dag_folder=sys.argv[1]); print(sum(len(d.tasks) for d in b.dags.values()))"
)
SCAN = (
    "import sys; from airflow_crashsafe.scan import scan_paths;"
    "r = scan_paths([sys.argv[1]]); print(len(r.tasks))"
)


def timed(code: str, folder: Path, env: dict[str, str]) -> tuple[float, int]:
    """Seconds a fresh process takes to run ``code`` on ``folder`` (import time included), tasks seen."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return time.perf_counter() - started, int(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dags", type=int, default=300)
    parser.add_argument("--tasks-per-dag", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="30 DAGs, one round (a smoke run)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    dags, rounds = (30, 1) if args.quick else (args.dags, args.rounds)
    with tempfile.TemporaryDirectory(prefix="crashsafe-scan-bench-") as tmp:
        folder = Path(tmp) / "dags"
        tasks = generate(folder, dags, args.tasks_per_dag)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "AIRFLOW_HOME": str(Path(tmp) / "home"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "ERROR",
        }
        base: list[float] = []
        scan: list[float] = []
        for _ in range(rounds):
            seconds, seen = timed(BASELINE, folder, env)
            base.append(seconds)
            assert seen == tasks, f"DagBag saw {seen} of {tasks} tasks"
            seconds, seen = timed(SCAN, folder, env)
            scan.append(seconds)
            assert seen == tasks, f"the scan reported {seen} of {tasks} tasks"
    figures = {
        "dags": dags,
        "tasks": tasks,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "workers": default_workers(),
        "dagbag_seconds": statistics.median(base),
        "scan_seconds": statistics.median(scan),
        "ratio": statistics.median(scan) / statistics.median(base),
        "target_seconds": TARGET_SECONDS,
    }
    print(
        f"{dags} DAGs / {tasks} tasks on {figures['cpus']} CPUs ({figures['workers']} scan workers), "
        f"median of {rounds} round(s), "
        "a fresh process each:\n"
        f"  Airflow DagBag alone  {figures['dagbag_seconds']:.1f} s\n"
        f"  airflow-crashsafe scan {figures['scan_seconds']:.1f} s  ({figures['ratio']:.2f}x the DagBag; "
        f"target <= {TARGET_SECONDS:.0f} s for 300 DAGs)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    within = figures["scan_seconds"] <= TARGET_SECONDS * dags / 300 * args.tasks_per_dag / 10
    return 0 if within or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
