"""The wedge scenario's DAG (copied into the drill's dags folder): many parallel tasks that just wait.

The wedge is the scheduler's failure, not an operator's, so its DAG does nothing but keep
``CRASHSAFE_DRILL_WEDGE_TASKS`` tasks running long enough (param ``work_seconds``) to be caught by
the kill, outlive the outage and be reset by the restarted scheduler (:mod:`drill.wedge`).
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from airflow.sdk import DAG, Param, task

DAG_ID = "drill_wedge"
TASK_PREFIX = "wait_"

with DAG(
    dag_id=DAG_ID,
    schedule=None,
    start_date=datetime(2024, 1, 1),
    catchup=False,
    max_active_tasks=256,  # every task runs at once (Airflow's default caps a DAG at 16)
    params={"work_seconds": Param(150, type="integer", minimum=0)},
    tags=["crashsafe-drill"],
):
    for i in range(int(os.environ.get("CRASHSAFE_DRILL_WEDGE_TASKS", "20"))):

        @task(task_id=f"{TASK_PREFIX}{i:02d}")
        def wait(params: dict[str, int] | None = None) -> None:
            """Sleep ``work_seconds``: long enough to be running at the kill and after the restart."""
            time.sleep(int((params or {}).get("work_seconds", 150)))

        wait()
