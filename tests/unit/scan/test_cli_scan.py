"""``airflow-crashsafe scan``: the JSON schema, SARIF 2.1.0, text, exit codes by --fail-on, bad paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_crashsafe.cli.main import main

DAG = """
from datetime import datetime
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.sdk import DAG
with DAG("cli_dag", schedule=None, start_date=datetime(2024, 1, 1)):
    SQLExecuteQueryOperator(task_id="append", conn_id="postgres_x", sql="INSERT INTO t SELECT * FROM s")
    SQLExecuteQueryOperator(task_id="read", conn_id="postgres_x", sql="SELECT 1")
    SQLExecuteQueryOperator(task_id="proc", conn_id="postgres_x", sql="CALL p()")
"""


@pytest.fixture
def dags(tmp_path: Path) -> Path:
    (tmp_path / "cli_dag.py").write_text(DAG)
    (tmp_path / "broken_dag.py").write_text("from airflow.sdk import DAG\nimport no_such_module_here\n")
    return tmp_path


def test_json_has_the_documented_schema(dags: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tasks[] with exactly the documented keys, a summary and the import errors."""
    code = main(["scan", str(dags), "--format", "json", "--fail-on", "never"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) == {"tasks", "summary", "import_errors", "files"}
    keys = {"dag_id", "task_id", "file", "line", "operator", "verdict", "category", "reasons", "fix"}
    assert all(set(t) == keys | {"analysis"} for t in out["tasks"])
    by_id = {t["task_id"]: t for t in out["tasks"] if t["dag_id"] == "cli_dag"}
    assert by_id["append"]["verdict"] == "risky"
    assert by_id["append"]["line"] == 6
    assert "NaturalKeyMergeOperator" in by_id["append"]["fix"]
    assert by_id["read"]["verdict"] == "safe"
    assert by_id["proc"]["verdict"] == "unknown"
    assert out["summary"]["risky"] == 1
    assert [Path(e["file"]).name for e in out["import_errors"]] == ["broken_dag.py"]
    assert "no_such_module_here" in out["import_errors"][0]["error"]
    assert out["import_errors"][0]["status"] == "import_error"
    assert {Path(f["file"]).name: f["status"] for f in out["files"]} == {
        "cli_dag.py": "imported",
        "broken_dag.py": "import_error",
    }
    assert {t["analysis"] for t in out["tasks"] if t["dag_id"] == "cli_dag"} == {"imported"}


def test_sarif_is_2_1_0_with_one_result_per_risky_or_unknown_task(
    dags: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SARIF 2.1.0: a run of our tool, an error per risky task and a warning per unknown one."""
    main(["scan", str(dags / "cli_dag.py"), "--format", "sarif"])
    sarif = json.loads(capsys.readouterr().out)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert run["tool"]["driver"]["name"] == "airflow-crashsafe scan"
    levels = sorted(r["level"] for r in run["results"])
    assert levels == ["error", "warning"]
    region = run["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] >= 1


@pytest.mark.parametrize(("fail_on", "expected"), [("risky", 1), ("unknown", 1), ("never", 0)])
def test_exit_code_follows_fail_on(
    dags: Path, fail_on: str, expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """--fail-on risky (default) and unknown exit 1 when such a task exists; never exits 0."""
    assert main(["scan", str(dags / "cli_dag.py"), "--fail-on", fail_on]) == expected
    capsys.readouterr()


def test_unknown_alone_fails_only_with_fail_on_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder with unknown but no risky tasks passes the default gate and fails --fail-on unknown."""
    (tmp_path / "only_unknown.py").write_text(DAG.replace("INSERT INTO t SELECT * FROM s", "SELECT 2"))
    assert main(["scan", str(tmp_path)]) == 0
    assert main(["scan", str(tmp_path), "--fail-on", "unknown"]) == 1
    text = capsys.readouterr().out
    assert "UNKNOWN" in text
    assert "0 risky, 1 unknown" in text


def test_missing_path_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A path that does not exist: exit 2 and one line saying what to give, no traceback."""
    assert main(["scan", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err
    assert "Traceback" not in err


def test_record_keeps_the_verdicts_for_the_risk_map(
    dags: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--record stores each scanned DAG's verdicts in the crashsafe store, risky first when read."""
    from airflow_crashsafe.store import open_store, reset_store_cache
    from airflow_crashsafe.store.scans import page

    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "store.db"))
    reset_store_cache()
    try:
        assert main(["scan", str(dags / "cli_dag.py"), "--record", "--fail-on", "never"]) == 0
        assert "recorded 3 task verdicts of 1 DAGs" in capsys.readouterr().err
        with open_store().transaction(immediate=False) as db:
            total, rows = page(db, dag_ids=["cli_dag"], verdicts=["risky", "unknown", "safe"], limit=10)
    finally:
        reset_store_cache()
    assert total == 3
    assert [(r["task_id"], r["verdict"]) for r in rows] == [
        ("append", "risky"),
        ("proc", "unknown"),
        ("read", "safe"),
    ]
    assert rows[0]["reasons"][0]["why"].startswith("an INSERT without a key")


def test_default_path_is_the_dags_folder(
    dags: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a PATH the scan reads [core] dags_folder."""
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(dags))
    assert main(["scan", "--format", "json", "--fail-on", "never"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t["dag_id"] for t in out["tasks"]} >= {"cli_dag"}


def test_a_template_that_does_not_render_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQL whose template fails to render with the sample run is unknown, never safe."""
    (tmp_path / "bad_template.py").write_text(
        DAG.replace("cli_dag", "bad_template").replace("SELECT 1", "{{ macros.no_such_macro(ds) }}")
    )
    main(["scan", str(tmp_path), "--format", "json", "--fail-on", "never"])
    tasks = {t["task_id"]: t for t in json.loads(capsys.readouterr().out)["tasks"]}
    assert tasks["read"]["verdict"] == "unknown"
    assert tasks["read"]["category"] == "unreadable_task"
