"""The storm scenario's DAGs (copied into the drill's dags folder): a night of loads into a finite warehouse.

One DAG per side and variant, ``storm_<side>_<variant>`` (sides ``plain`` and ``crashsafe``,
variants from ``CRASHSAFE_STORM_VARIANTS``). Each has ``CRASHSAFE_STORM_LOADS`` loads, ``load_00``
first, then ``report`` once every load is done. Load ``i`` waits in its task (``pre_execute``,
outside the warehouse) until its source lands — the drill writes the night's start into
``storm.night`` and sources land at a steady interval — then does its work in its DAG's own
warehouse, ``storm.load()`` (:mod:`drill.storm_warehouse`), under the loader role's statement
timeout. A timed-out load fails its try and Airflow retries it (``CRASHSAFE_STORM_RETRIES`` times,
``CRASHSAFE_STORM_RETRY_DELAY`` seconds apart).

The plain side's load is ``SQLExecuteQueryOperator`` (an autocommit INSERT); the crashsafe side's
is ``NaturalKeyMergeOperator``, a server-side unit that a reset re-run adopts while it runs, and
whose re-run that must redo the work takes one of ``CRASHSAFE_STORM_BUDGET`` recovery places of
its warehouse first. Nothing else differs.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta
from typing import Any

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG

CONN_ID = "storm_warehouse"
#: ``application_name`` of a load's connection while it waits for its source.
WAIT_PREFIX = "storm-wait:"
SIDES = ("plain", "crashsafe")
VARIANTS = [v for v in os.environ.get("CRASHSAFE_STORM_VARIANTS", "adopt,lost").split(",") if v]
LOADS = int(os.environ.get("CRASHSAFE_STORM_LOADS", "8"))
STEPS = int(os.environ.get("CRASHSAFE_STORM_STEPS", "18"))
STEP_SECONDS = float(os.environ.get("CRASHSAFE_STORM_STEP_SECONDS", "1.0"))
CAPACITY = int(os.environ.get("CRASHSAFE_STORM_CAPACITY", "4"))
RETRIES = int(os.environ.get("CRASHSAFE_STORM_RETRIES", "3"))
RETRY_DELAY = float(os.environ.get("CRASHSAFE_STORM_RETRY_DELAY", "5"))
BUDGET = int(os.environ.get("CRASHSAFE_STORM_BUDGET", "4"))

PLAIN_SQL = """
INSERT INTO storm.loaded (dag_id, load_id, steps)
SELECT %(dag_id)s, %(load_id)s, storm.load(%(dag_id)s, %(label)s, %(steps)s, %(step)s, %(capacity)s)
"""
CRASHSAFE_SOURCE = """
WITH work AS MATERIALIZED (
    SELECT storm.load(%(dag_id)s, %(label)s, %(steps)s, %(step)s, %(capacity)s) AS steps
)
SELECT %(dag_id)s::text AS dag_id, %(load_id)s::integer AS load_id, work.steps FROM work
"""


def wait_for_source(context: Any) -> None:
    """Wait until this load's source landed (the night's start is in ``storm.night``); at once if it has."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    ti = context["ti"]
    index = int(ti.task_id.rsplit("_", 1)[1])
    sql = "SELECT first_arrival + %s * arrival_interval FROM storm.night WHERE dag_id = %s"
    # One connection for the whole wait: a new one per poll, times every waiting load, is a fork
    # of a PostgreSQL backend each time, and that CPU would slow the warehouse's own clock.
    conn = PostgresHook(postgres_conn_id=CONN_ID).get_conn()
    try:
        with conn.cursor() as cursor:  # read committed: each poll sees the drill's insert
            # The drill starts the night once every load waits here (it counts these backends).
            cursor.execute(
                "SELECT set_config('application_name', %s, false)",
                (f"{WAIT_PREFIX}{ti.dag_id}/{ti.task_id}",),
            )
            while True:
                cursor.execute(sql, (index, ti.dag_id))
                row = cursor.fetchone()
                if row is not None:
                    break
                time.sleep(0.5)
    finally:
        conn.close()
    left = float(row[0]) - time.time()
    if left > 0:
        time.sleep(left)


def _load(side: str, dag_id: str, index: int, variant: str) -> Any:
    task_id = f"load_{index:02d}"
    parameters = {
        "dag_id": dag_id,
        "load_id": index,
        "label": f"{dag_id}/{task_id}",
        "steps": STEPS,
        "step": STEP_SECONDS,
        "capacity": CAPACITY,
    }
    common: dict[str, Any] = {
        "task_id": task_id,
        "conn_id": CONN_ID,
        "parameters": parameters,
        "pre_execute": wait_for_source,
        "priority_weight": LOADS - index,  # the scheduler starts the earlier sources first
    }
    if side == "plain":
        return SQLExecuteQueryOperator(sql=PLAIN_SQL, autocommit=True, **common)
    from airflow_crashsafe.operators.sql import NaturalKeyMergeOperator

    return NaturalKeyMergeOperator(
        target_table="storm.loaded_once",
        sql=CRASHSAFE_SOURCE,
        natural_key=["dag_id", "load_id"],
        recovery_concurrency=BUDGET,
        recovery_resource=f"{CONN_ID}:{variant}",  # each DAG has a warehouse of its own
        **common,
    )


for _side in SIDES:
    for _variant in VARIANTS:
        _dag_id = f"storm_{_side}_{_variant}"
        with DAG(
            dag_id=_dag_id,
            schedule=None,
            start_date=datetime(2024, 1, 1),
            catchup=False,
            max_active_tasks=256,
            max_active_runs=1,
            default_args={"retries": RETRIES, "retry_delay": timedelta(seconds=RETRY_DELAY)},
            tags=["crashsafe-drill", "storm"],
        ) as _dag:
            _table = "storm.loaded" if _side == "plain" else "storm.loaded_once"
            _report = SQLExecuteQueryOperator(
                task_id="report",
                conn_id=CONN_ID,
                sql=f"SELECT count(*) FROM {_table} WHERE dag_id = %(dag_id)s",
                parameters={"dag_id": _dag_id},
            )
            for _i in range(LOADS):
                _load(_side, _dag_id, _i, _variant) >> _report
        globals()[_dag_id] = _dag
