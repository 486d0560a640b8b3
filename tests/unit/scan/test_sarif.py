"""SARIF 2.1.0: valid against the OASIS schema, one rule per category with help, every result located."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from airflow_crashsafe.cli.main import main

SCHEMA = Path(__file__).resolve().parents[2] / "data" / "sarif-schema-2.1.0.json"
DAG = """
from airflow.sdk import DAG
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
REGION = "eu"
with DAG("sarif_dag", schedule=None):
    SQLExecuteQueryOperator(task_id="append", conn_id="postgres_x", sql="INSERT INTO t SELECT * FROM s")
    SQLExecuteQueryOperator(task_id="proc", conn_id="postgres_x", sql="CALL p()")
    SQLExecuteQueryOperator(task_id="load_" + REGION, conn_id="postgres_x", sql="INSERT INTO u SELECT 1")
    SQLExecuteQueryOperator(task_id="read", conn_id="postgres_x", sql="SELECT 1")
"""


@pytest.fixture
def sarif(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    (tmp_path / "sarif_dag.py").write_text(DAG)
    (tmp_path / "broken.py").write_text("from airflow.sdk import DAG\nimport no_such_module_here\n")
    assert main(["scan", str(tmp_path), "--format", "sarif"]) == 1
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_report_is_valid_against_the_sarif_2_1_0_schema(sarif: dict[str, Any]) -> None:
    """The OASIS SARIF 2.1.0 schema (errata 01) accepts the report."""
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(sarif)
    assert sarif["version"] == "2.1.0"


def test_one_rule_per_category_with_descriptions_and_help(sarif: dict[str, Any]) -> None:
    """Rules are crashsafe/<category>, each with short and full descriptions and help naming the fix."""
    run = sarif["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    assert set(ids) == {"crashsafe/append", "crashsafe/procedure_call", "crashsafe/import_error"}
    for rule in rules:
        assert rule["shortDescription"]["text"]
        assert rule["fullDescription"]["text"]
        assert "Fix:" in rule["help"]["text"]
    for result in run["results"]:
        assert ids[result["ruleIndex"]] == result["ruleId"]
    levels = {r["properties"].get("task_id", "file"): r["level"] for r in run["results"]}
    assert levels == {"append": "error", "load_eu": "error", "proc": "warning", "file": "error"}


def test_a_task_without_a_known_line_points_at_its_dags_line(sarif: dict[str, Any]) -> None:
    """``task_id="load_" + REGION`` has no line of its own: the result points at the DAG's line (5)."""
    results = {r["properties"].get("task_id", "file"): r for r in sarif["runs"][0]["results"]}

    def line(key: str) -> int:
        return int(results[key]["locations"][0]["physicalLocation"]["region"]["startLine"])

    assert line("append") == 6
    assert line("load_eu") == 5
