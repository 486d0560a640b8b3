"""The scan on folders with files that crash, hang, print or do not import: the gate fails closed.

The scan runs as CI runs it, ``airflow-crashsafe scan`` in a process of its own, on real files;
each file is imported in a real worker process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_crashsafe.cli.main import main

RISKY = """
from airflow.sdk import DAG
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
with DAG("risky_dag", schedule=None):
    SQLExecuteQueryOperator(task_id="append", conn_id="postgres_x", sql="INSERT INTO t SELECT * FROM s")
"""
BAD_FILES = {
    "exits.py": """
import os
from airflow.sdk import DAG
from airflow.providers.standard.operators.bash import BashOperator
with DAG("exits_dag", schedule=None):
    BashOperator(task_id="mail_out", bash_command="mail -s report ops@example.com < /dev/null")
os._exit(0)
""",
    "spins.py": "from airflow.sdk import DAG\nwhile True:\n    pass\n",
    "sleeps.py": """
import signal, time
from airflow.sdk import DAG
signal.signal(signal.SIGALRM, signal.SIG_IGN)  # Airflow's own import timeout cannot stop it
time.sleep(3600)
""",
    "killed.py": "import os\nfrom airflow.sdk import DAG\nos.kill(os.getpid(), 9)\n",
    "airflow2.py": """
from airflow import DAG
from airflow.operators.dummy_operator import DummyOperator
from airflow.operators.postgres_operator import PostgresOperator
from airflow.utils.dates import days_ago
dag = DAG("airflow2_dag", schedule_interval="@daily", start_date=days_ago(1))
start = DummyOperator(task_id="start", dag=dag)
load = PostgresOperator(task_id="load", postgres_conn_id="pg", sql="INSERT INTO t SELECT 1", dag=dag)
start >> load
""",
    "no_provider.py": """
from airflow.sdk import DAG
from airflow.providers.databricks.operators.databricks_sql import DatabricksSqlOperator
with DAG("no_provider_dag", schedule=None):
    DatabricksSqlOperator(task_id="read_it", sql="SELECT 1")
""",
}
PRINTS = """
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator
print('{"tasks": []}')
with DAG("prints_dag", schedule=None):
    EmptyOperator(task_id="noop")
"""


def _scan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_crashsafe.cli.main", "scan", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.fixture(scope="module")
def bad_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bad_dags")
    (folder / "risky.py").write_text(RISKY)
    (folder / "prints.py").write_text(PRINTS)
    for name, text in BAD_FILES.items():
        (folder / name).write_text(text)
    return folder


def test_gate_fails_and_reports_every_file_though_some_crash_or_hang(bad_folder: Path) -> None:
    """Exit 1; JSON on stdout; the risky task reported; each bad file's status and why; the rest judged."""
    done = _scan(str(bad_folder), "--format", "json", "--timeout", "2")
    assert done.returncode == 1, done.stderr[-2000:]
    out = json.loads(done.stdout)
    files = {Path(f["file"]).name: f for f in out["files"]}
    tasks = {(t["dag_id"], t["task_id"]): t for t in out["tasks"]}

    assert tasks[("risky_dag", "append")]["verdict"] == "risky"
    assert tasks[("prints_dag", "noop")]["analysis"] == "imported"
    assert files["prints.py"]["status"] == "imported"
    assert files["exits.py"]["status"] == "crashed"
    assert "exited with code 0" in files["exits.py"]["error"]
    assert files["killed.py"]["status"] == "crashed"
    assert "SIGKILL" in files["killed.py"]["error"]
    assert files["spins.py"]["status"] == "timed_out"  # Airflow's own import timeout stopped it
    assert "DagBag import timeout" in files["spins.py"]["error"]
    assert files["sleeps.py"]["status"] == "timed_out"  # the scan stopped the process
    assert "took longer than 2 s" in files["sleeps.py"]["error"]
    assert files["airflow2.py"]["status"] == "import_error"
    assert "dummy_operator" in files["airflow2.py"]["error"]
    assert "databricks" in files["no_provider.py"]["error"]
    assert len(out["import_errors"]) == 6
    assert out["summary"]["file_status"] == {"imported": 2, "import_error": 2, "crashed": 2, "timed_out": 2}

    # the files that did not import are still judged, from their syntax tree
    mail = tasks[("exits_dag", "mail_out")]
    assert (mail["verdict"], mail["analysis"]) == ("risky", "static")
    assert tasks[("airflow2_dag", "start")]["verdict"] == "safe"
    assert tasks[("airflow2_dag", "load")]["verdict"] == "risky"
    assert tasks[("no_provider_dag", "read_it")]["verdict"] == "safe"


def test_text_summary_names_the_files_and_why(bad_folder: Path) -> None:
    """The text report lists each file that was not imported with its status and says the gate fails."""
    done = _scan(str(bad_folder), "--timeout", "2")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert any(ln.startswith("CRASHED") and "exits.py" in ln and "os._exit" in ln for ln in lines)
    assert any(ln.startswith("TIMEOUT") and "sleeps.py" in ln for ln in lines)
    assert any(ln.startswith("IMPORT") and "airflow2.py" in ln for ln in lines)
    assert "6 of 8 files were not imported (2 import errors, 2 crashed, 2 timed out)" in done.stdout
    assert '{"tasks": []}' not in done.stdout  # what a DAG file prints goes to stderr


@pytest.mark.parametrize(("fail_on", "expected"), [("risky", 1), ("unknown", 1), ("never", 0)])
def test_a_file_that_does_not_import_fails_the_gate_though_its_tasks_read_safe(
    tmp_path: Path, fail_on: str, expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """No risky or unknown task, one file that does not import: --fail-on risky/unknown exit 1, never 0."""
    (tmp_path / "fine.py").write_text(RISKY.replace("INSERT INTO t SELECT * FROM s", "SELECT 1"))
    (tmp_path / "old.py").write_text(
        "from airflow.sdk import DAG\nfrom airflow.operators.dummy import DummyOperator\n"
        'with DAG("old", schedule=None):\n    DummyOperator(task_id="start")\n'
    )
    assert main(["scan", str(tmp_path), "--format", "json", "--fail-on", fail_on]) == expected
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["risky"] == out["summary"]["unknown"] == 0
    assert [Path(e["file"]).name for e in out["import_errors"]] == ["old.py"]


def test_plugins_folder_is_on_the_path_and_airflowignore_is_honoured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DAG importing a module of --plugins-folder imports; a file .airflowignore names is not read."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "team_sql.py").write_text('LOAD = "INSERT INTO t SELECT * FROM s"\n')
    dags = tmp_path / "dags"
    dags.mkdir()
    uses = RISKY.replace('sql="INSERT INTO t SELECT * FROM s"', "sql=LOAD")
    (dags / "uses_plugin.py").write_text("from team_sql import LOAD\n" + uses)
    (dags / "ignored.py").write_text(
        "from airflow.sdk import DAG\nraise RuntimeError('read an ignored file')\n"
    )
    (dags / ".airflowignore").write_text("ignored.py\n")
    code = main(["scan", str(dags), "--plugins-folder", str(plugins), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    assert out["import_errors"] == []
    assert [Path(f["file"]).name for f in out["files"]] == ["uses_plugin.py"]
    assert out["tasks"][0]["verdict"] == "risky"
    assert out["tasks"][0]["analysis"] == "imported"


def test_static_dag_ids_never_clash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two files read statically with one placeholder DAG id keep all their tasks (imports would clash)."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.py").write_text(
            "from airflow.sdk import DAG\nfrom airflow.operators.dummy import DummyOperator\n"
            f'with DAG("PLACEHOLDER", schedule=None):\n    DummyOperator(task_id="start_{name}")\n'
        )
    main(["scan", str(tmp_path), "--format", "json", "--fail-on", "never"])
    out = json.loads(capsys.readouterr().out)
    assert sorted(t["task_id"] for t in out["tasks"]) == ["start_a", "start_b"]
