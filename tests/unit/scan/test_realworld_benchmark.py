"""The real-world benchmark's label matching, scores, checkout guard and Airflow 2 porting, on tiny inputs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.port_airflow2 import port_source, providers_in
from benchmarks.realworld_corpus import (
    STAMP,
    CheckoutError,
    Repo,
    checkout,
    load_labels,
    load_manifest,
    verify_checkouts,
)
from benchmarks.realworld_metrics import Label, ScannedTask, match_labels, relative_file, score, worst


def _label(task_id: str, label: str, file: str = "dags/a.py", dag: str = "a") -> Label:
    return Label("o/r", file, dag, task_id, label)


def _task(task_id: str, verdict: str, file: str = "dags/a.py", dag: str = "a") -> ScannedTask:
    return ScannedTask("o/r", file, dag, task_id, verdict)


LABELS = [
    _label("append", "risky"),  # called risky: a hit
    _label("swap", "risky"),  # called safe: false-safe
    _label("mail", "risky"),  # not named at all: missed, not false-safe
    _label("read", "safe"),  # called risky: a false alarm
    _label("pod", "unknown-by-nature"),  # called unknown: agreement
    _label("load_*", "risky"),  # pattern: worst of load_a (safe) and load_b (unknown)
    _label("built", "safe", file="dags/helpers.py"),  # the scan put it in the DAG file: matched by dag id
]
TASKS = [
    _task("append", "risky"),
    _task("swap", "safe"),
    _task("read", "risky"),
    _task("pod", "unknown"),
    _task("load_a", "safe"),
    _task("load_b", "unknown"),
    _task("built", "safe"),
    _task("extra", "risky", file="dags/other.py", dag="other"),  # unlabelled: ignored
]


def test_matching_by_file_then_dag_and_patterns_take_the_worst() -> None:
    """Exact ids match in the same file, ``*`` ids match every task, other files by DAG id."""
    matches = {m.label.task_id: m for m in match_labels(LABELS, TASKS)}
    assert matches["append"].by == "file"
    assert matches["append"].verdict == "risky"
    assert matches["mail"].tasks == []
    assert matches["mail"].verdict is None
    assert [t.task_id for t in matches["load_*"].tasks] == ["load_a", "load_b"]
    assert matches["load_*"].verdict == "unknown"
    assert matches["built"].by == "dag"
    assert matches["built"].verdict == "safe"


def test_scores_on_a_worked_example() -> None:
    """Recall counts unnamed risky tasks as missed; precision and unknown share are over named ones."""
    s = score(match_labels(LABELS, TASKS))
    assert s["tasks"] == 7
    assert s["named"] == 6
    assert s["named_share"] == pytest.approx(6 / 7)
    assert s["labelled_risky"] == 4
    assert s["risky_recall"] == pytest.approx(1 / 4)  # append only; swap safe, mail unnamed, load_* unknown
    assert s["called_risky"] == 2
    assert s["risky_precision"] == pytest.approx(1 / 2)
    assert s["false_safe"] == 1  # swap
    assert s["unknown_share"] == pytest.approx(2 / 6)  # pod, load_*
    assert s["agreement"] == pytest.approx(3 / 6)  # append, pod, built
    assert s["matched_by_dag"] == 1


def test_empty_groups_score_none_not_zero() -> None:
    """A group without risky labels or named tasks has no recall or precision rather than a perfect one."""
    s = score(match_labels([_label("x", "safe")], []))
    assert s["risky_recall"] is None
    assert s["risky_precision"] is None
    assert s["named_share"] == 0


def test_worst_and_relative_file() -> None:
    """The severity order is the scan's, and files outside the root are left as they are."""
    assert worst(["safe", "protected"]) == "protected"
    assert worst(["unknown", "risky", "safe"]) == "risky"
    assert relative_file("/x/repo/dags/a.py", "/x/repo") == "dags/a.py"
    assert relative_file("/elsewhere/a.py", "/x/repo") == "/elsewhere/a.py"


def test_corpus_files_agree_with_each_other() -> None:
    """Every label names a manifest repository at its commit, a labelled file and a known label."""
    repos = {r.name: r for r in load_manifest()}
    labels = load_labels()
    assert len(labels) >= 400
    assert sum(1 for x in labels if x.label == "risky") >= 80
    assert {x.label for x in labels} <= {"risky", "safe", "protected", "unknown-by-nature"}
    for x in labels:
        assert x.file in repos[x.repo].labelled_files, x
    held = [x for x in labels if repos[x.repo].split == "heldout"]
    assert sum(1 for r in repos.values() if r.split == "heldout") >= 3
    assert 0.35 <= len(held) / len(labels) <= 0.45


def _git_repo(tmp_path: Path) -> tuple[Path, str]:
    work = tmp_path / "src"
    work.mkdir()
    (work / "dags").mkdir()
    (work / "dags" / "a.py").write_text("x = 1\n")
    run = {"cwd": work, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **run)  # type: ignore[call-overload]
    subprocess.run(["git", "add", "."], **run)  # type: ignore[call-overload]
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
        **run,  # type: ignore[call-overload]
    )
    head = subprocess.run(["git", "rev-parse", "HEAD"], text=True, **run).stdout.strip()  # type: ignore[call-overload]
    return work / ".git", head


def test_checkout_stamps_the_commit_and_verify_refuses_other_states(tmp_path: Path) -> None:
    """A missing folder or another commit is refused with the fix named; a fresh checkout passes."""
    git_dir, head = _git_repo(tmp_path)
    repo = Repo("o/r", head, "MIT", "tune", ("dags",), (), (), ("dags/a.py",))
    repos_dir = tmp_path / "repos"
    with pytest.raises(CheckoutError, match=r"(?s)does not exist.*checkout --mirrors"):
        verify_checkouts([repo], repos_dir)
    assert checkout(repo, git_dir, repos_dir) == []
    assert (repos_dir / "o+r" / "dags" / "a.py").read_text() == "x = 1\n"
    verify_checkouts([repo], repos_dir)
    (repos_dir / "o+r" / STAMP).write_text("0" * 40)
    with pytest.raises(CheckoutError, match="want " + head):
        verify_checkouts([repo], repos_dir)


def test_port_rewrites_removed_airflow2_paths_keeping_local_names() -> None:
    """dummy/postgres imports, days_ago, provide_context, schedule_interval and apply_defaults are ported."""
    ported = port_source(
        "from airflow.operators.dummy import DummyOperator\n"
        "from airflow.providers.postgres.operators.postgres import PostgresOperator\n"
        "from airflow.utils.dates import days_ago\n"
        "from airflow.utils.decorators import apply_defaults\n"
        "class Op:\n"
        "    @apply_defaults\n"
        "    def __init__(self): pass\n"
        "d = DAG('x', start_date=days_ago(1), schedule_interval='@daily')\n"
        "DummyOperator(task_id='a', provide_context=True)\n"
        "PostgresOperator(task_id='b', postgres_conn_id='pg', sql='select 1')\n"
    )
    assert "from airflow.providers.standard.operators.empty import EmptyOperator as DummyOperator" in ported
    assert "import SQLExecuteQueryOperator as PostgresOperator" in ported
    assert "airflow.utils" not in ported
    assert "apply_defaults" not in ported
    assert 'pendulum.today("UTC").add(days = -1)' in ported
    assert ported.startswith("import pendulum\n")
    assert "schedule='@daily'" in ported
    assert "provide_context" not in ported
    assert "conn_id='pg'" in ported
    assert "postgres_conn_id" not in ported
    compile(ported, "ported.py", "exec")


def test_providers_are_read_from_imports(tmp_path: Path) -> None:
    """google.cloud counts as google; common.sql and cncf.kubernetes keep their two-part names."""
    (tmp_path / "a.py").write_text(
        "from airflow.providers.google.cloud.operators.bigquery import X\n"
        "import airflow.providers.common.sql.hooks.sql\n"
        "from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator\n"
    )
    assert providers_in(tmp_path) == {"google", "common.sql", "cncf.kubernetes"}
