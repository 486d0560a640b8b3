"""OpenLineage of the fenced SQL operators: the datasets they read and write, as common.sql reports."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from airflow_crashsafe.operators import FencedSQLOperator, NaturalKeyMergeOperator, PartitionOverwriteOperator
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

HAS_OPENLINEAGE = importlib.util.find_spec("airflow.providers.openlineage") is not None
SOURCE = (
    "SELECT o.day, c.region, sum(o.amount) AS amount "
    "FROM sales.orders o JOIN customers c USING (cid) GROUP BY 1, 2"
)

#: The tables SOURCE reads and the operators write (PostgreSQL).
WAREHOUSE = (
    "CREATE SCHEMA sales",
    "CREATE SCHEMA mart",
    "CREATE TABLE sales.orders (day int, cid int, amount int)",
    "CREATE TABLE customers (cid int, region text)",
    "CREATE TABLE mart.revenue (day int, region text, amount int)",
    'CREATE TABLE mart."Revenue" (day int PRIMARY KEY, region text, amount int)',
)


def _operators(conn_id: str) -> dict[str, Any]:
    return {
        "overwrite": PartitionOverwriteOperator(
            task_id="overwrite",
            conn_id=conn_id,
            target_table="mart.revenue",
            partition={"day": 1},
            sql=SOURCE,
        ),
        "merge": NaturalKeyMergeOperator(
            task_id="merge",
            conn_id=conn_id,
            target_table='mart."Revenue"',
            natural_key=["day"],
            sql=SOURCE + ";",
        ),
        "statements": FencedSQLOperator(
            task_id="statements",
            conn_id=conn_id,
            target="mart.revenue",
            sql=["DELETE FROM mart.revenue WHERE day = 1", f"INSERT INTO mart.revenue {SOURCE}"],
        ),
    }


def test_each_operator_describes_its_write_as_sql() -> None:
    """Overwrite and merge read as INSERT INTO <target, quoted exactly> <query>; statements as written."""
    ops = _operators("unused")
    assert ops["overwrite"].lineage_sql() == [f'INSERT INTO "mart"."revenue" {SOURCE}']
    assert ops["merge"].lineage_sql() == [f'INSERT INTO "mart"."Revenue" {SOURCE}']
    assert ops["statements"].lineage_sql() == ops["statements"].sql


@pytest.mark.skipif(HAS_OPENLINEAGE, reason="the OpenLineage provider is installed")
def test_without_the_openlineage_provider_there_is_no_lineage(pg_target: SqlTarget) -> None:
    """As common.sql's operators, the methods answer None when the provider is missing (and never raise)."""
    op = _operators(pg_target.conn_id)["overwrite"]
    assert op.get_openlineage_facets_on_start() is None
    assert op.get_openlineage_facets_on_complete(None) is None


@pytest.mark.skipif(not HAS_OPENLINEAGE, reason="needs apache-airflow-providers-openlineage")
def test_datasets_are_the_tables_read_and_written(pg_target: SqlTarget) -> None:
    """Inputs are the query's tables, the output the target, named as PostgresHook names them."""
    for ddl in WAREHOUSE:
        pg_target.run(ddl)
    database = pg_target.url.rsplit("/", 1)[1].split("?")[0]
    for name, op in _operators(pg_target.conn_id).items():
        lineage = op.get_openlineage_facets_on_complete(None)
        inputs = sorted((d.namespace, d.name) for d in lineage.inputs)
        outputs = [(d.namespace, d.name) for d in lineage.outputs]
        namespace = inputs[0][0]
        assert namespace.startswith("postgres://"), name
        assert inputs == [
            (namespace, f"{database}.public.customers"),
            (namespace, f"{database}.sales.orders"),
        ], name
        target = "Revenue" if name == "merge" else "revenue"
        assert outputs == [(namespace, f"{database}.mart.{target}")], name
        schema = lineage.outputs[0].facets["schema"]
        assert [f.name for f in schema.fields][:2] == ["day", "region"], name


@pytest.mark.skipif(not HAS_OPENLINEAGE, reason="needs apache-airflow-providers-openlineage")
def test_the_providers_extractor_uses_these_methods(pg_target: SqlTarget) -> None:
    """The OpenLineage listener's ExtractorManager finds the operator's lineage, on start and on success."""
    from types import SimpleNamespace

    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.utils.state import TaskInstanceState

    pg_target.run("CREATE TABLE src (day int)")
    pg_target.run("CREATE TABLE dst (day int)")
    op = PartitionOverwriteOperator(
        task_id="overwrite",
        conn_id=pg_target.conn_id,
        target_table="dst",
        partition={"day": 1},
        sql="SELECT day FROM src",
    )
    run = SimpleNamespace(run_id="manual__1")
    for state in (TaskInstanceState.RUNNING, TaskInstanceState.SUCCESS):
        lineage = ExtractorManager().extract_metadata(run, op, state, None)
        assert [d.name.rsplit(".", 1)[1] for d in lineage.inputs] == ["src"], state
        assert [d.name.rsplit(".", 1)[1] for d in lineage.outputs] == ["dst"], state
