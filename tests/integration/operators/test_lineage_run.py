"""OpenLineage from a real task run: ``dag.test()`` of fenced SQL operators on PostgreSQL, events
sent by the OpenLineage provider's listener over its ``http`` transport to a local server.

The run is a child process with its own ``AIRFLOW_HOME`` and SQLite metadata DB (``airflow db
migrate``, then the DAG file's ``dag.test()``): the task runs in that process through Airflow's
task runner, whose listener hooks the provider uses, exactly as on a worker.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.audit.spool import deliver
from airflow_crashsafe.store.attempts import task_rows
from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing.http import LocalServer, serve
from drill.airflow_home import DrillHome, component_env
from tests.integration.operators.test_lineage import WAREHOUSE

pytestmark = [
    pytest.mark.integration,
    pytest.mark.floor,  # CI's floor subset (docs/packaging.md, "Version floor")
    pytest.mark.skipif(
        importlib.util.find_spec("airflow.providers.openlineage") is None,
        reason="needs apache-airflow-providers-openlineage (the test extra installs it)",
    ),
]

DAG_FILE = """
from datetime import datetime, timezone

from airflow.sdk import DAG

from airflow_crashsafe.operators import NaturalKeyMergeOperator, PartitionOverwriteOperator

SOURCE = "SELECT o.day, c.region, o.amount FROM sales.orders o JOIN customers c USING (cid)"

with DAG("lineage_run", schedule=None, start_date=datetime(2024, 1, 1, tzinfo=timezone.utc)) as dag:
    PartitionOverwriteOperator(
        task_id="overwrite", conn_id="warehouse", target_table="mart.revenue",
        partition={"day": 1}, sql=SOURCE + " WHERE o.day = 1",
    ) >> NaturalKeyMergeOperator(
        task_id="merge", conn_id="warehouse", target_table='mart."Revenue"', natural_key=["day"], sql=SOURCE,
    )

if __name__ == "__main__":
    run = dag.test(logical_date=datetime(2024, 1, 2, tzinfo=timezone.utc))
    print("dag run state:", run.state)
"""


@pytest.fixture
def warehouse(postgres_url: str) -> str:
    """The PostgreSQL database the tasks read and write, with a day of orders."""
    db = connect_url(postgres_url)
    try:
        db.begin()
        for ddl in (
            *WAREHOUSE,
            "INSERT INTO customers VALUES (7, 'eu')",
            "INSERT INTO sales.orders VALUES (1, 7, 10)",
        ):
            db.execute(ddl)
        db.commit()
    finally:
        db.close()
    return postgres_url


@pytest.fixture
def lineage_server() -> Iterator[LocalServer]:
    """What an OpenLineage backend (Marquez) would be: it answers 200 and keeps what it got."""
    with serve() as server:
        yield server


def run_dag(home: DrillHome, warehouse: str, server: LocalServer) -> subprocess.CompletedProcess[str]:
    dags = home.root / "dags"
    dags.mkdir()
    dag_file = dags / "lineage_run.py"
    dag_file.write_text(textwrap.dedent(DAG_FILE))
    transport = {"type": "http", "url": server.url, "endpoint": "api/v1/lineage"}
    env = component_env(
        home,
        dags_folder=dags,
        metadata_url=f"sqlite:///{home.metadata_sqlite}",
        extra={
            "AIRFLOW_CONN_WAREHOUSE": warehouse,
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "crashsafe-test",
            # The provider emits from a forked process it kills after this many seconds (10 by
            # default): a busy CI machine must not lose an event.
            "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "120",
        },
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    migrated = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    return subprocess.run(
        [sys.executable, str(dag_file)], env=env, capture_output=True, text=True, timeout=240, check=False
    )


def events(server: LocalServer, job: str) -> dict[str, dict[str, Any]]:
    """The run events of job ``job`` the server got, by event type."""
    bodies = [request.json() for request in server.requests if request.path == "/api/v1/lineage"]
    return {body["eventType"]: body for body in bodies if body["job"]["name"] == job}


def names(datasets: list[dict[str, Any]]) -> list[str]:
    return sorted(d["name"] for d in datasets)


def test_a_real_run_emits_the_tables_read_and_written(
    tmp_path: Path, warehouse: str, lineage_server: LocalServer
) -> None:
    """dag.test(): START and COMPLETE of each fenced task carry its source tables and its target;
    the audit listener records each attempt."""
    home = DrillHome.create(str(tmp_path))
    done = run_dag(home, warehouse, lineage_server)
    assert "dag run state: success" in done.stdout, (done.stdout + done.stderr)[-4000:]
    database = warehouse.rsplit("/", 1)[1].split("?")[0]
    sources = [f"{database}.public.customers", f"{database}.sales.orders"]
    for task, target in (("overwrite", "revenue"), ("merge", "Revenue")):
        seen = events(lineage_server, f"lineage_run.{task}")
        assert set(seen) == {"START", "COMPLETE"}, (task, sorted(seen))
        for kind, event in seen.items():
            assert names(event["inputs"]) == sources, (task, kind)
            assert names(event["outputs"]) == [f"{database}.mart.{target}"], (task, kind)
            assert {d["namespace"] for d in event["inputs"] + event["outputs"]} == {
                event["outputs"][0]["namespace"]
            }
            assert event["outputs"][0]["namespace"].startswith("postgres://"), (task, kind)
        fields = seen["COMPLETE"]["outputs"][0]["facets"]["schema"]["fields"]
        assert [f["name"] for f in fields] == ["day", "region", "amount"], task
    db = connect_url(warehouse)
    try:  # the lineage is of writes that happened
        assert db.execute("SELECT day, region, amount FROM mart.revenue").fetchall() == [(1, "eu", 10)]
        assert db.execute('SELECT day, region, amount FROM mart."Revenue"').fetchall() == [(1, "eu", 10)]
    finally:
        db.close()
    # The audit listener ran in the same task runner and recorded each attempt's start and end: in
    # the store, or in the spool when the store did not answer in time (delivered here, as
    # ``audit reconcile`` does).
    url = f"sqlite:///{home.airflow_home / 'crashsafe.db'}"
    audit = Store(lambda: connect_url(url), url)
    deliver(audit, home.airflow_home / "crashsafe-spool")
    audit.close()
    store = connect_url(url)
    try:
        for task in ("overwrite", "merge"):
            [row] = task_rows(store, dag_id="lineage_run", task_id=task, map_index=-1)
            assert (row["start_source"], row["end_source"], row["reported_state"]) == (
                "listener",
                "listener",
                "success",
            ), row
    finally:
        store.close()
