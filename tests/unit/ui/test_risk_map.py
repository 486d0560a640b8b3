"""The risk map: the latest recorded scan per DAG, filtered to readable DAGs, with the audit's duplicates."""

from __future__ import annotations

import time

from airflow_crashsafe.store.scans import record
from benchmarks.crash_records import seed_crash
from tests.unit.ui.conftest import UiHarness


def _task(dag_id: str, task_id: str, verdict: str, **extra: object) -> dict[str, object]:
    return {
        "dag_id": dag_id,
        "task_id": task_id,
        "file": f"/dags/{dag_id}.py",
        "line": 12,
        "operator": "airflow.providers.common.sql.operators.sql.SQLExecuteQueryOperator",
        "verdict": verdict,
        "category": "append" if verdict == "risky" else "read_only",
        "reasons": [
            {"why": "an INSERT without a key", "evidence": "INSERT INTO t", "file": None, "line": 12}
        ],
        "fix": "NaturalKeyMergeOperator(...)" if verdict == "risky" else "",
        **extra,
    }


def _seed(ui: UiHarness) -> None:
    seed_crash(ui.store, ["alice_nightly", "bob_ledger"], tasks=2)
    with ui.store.transaction() as db:
        record(
            db,
            [
                _task("alice_nightly", "load_0", "risky"),
                _task("alice_nightly", "load_1", "safe"),
                _task("alice_nightly", "report", "unknown"),
                _task("bob_ledger", "load_0", "risky"),
            ],
            scanned_at=time.time() - 60,
        )
    ui.allowed = {"alice_nightly"}


def test_lists_readable_dags_risky_first_with_runs_twice(ui: UiHarness) -> None:
    """Only readable DAGs, risky then unknown then safe; a risky task that ran twice says so."""
    _seed(ui)
    out = ui.get("/api/risk").json()
    assert [(t["dag_id"], t["task_id"], t["verdict"]) for t in out["items"]] == [
        ("alice_nightly", "load_0", "risky"),
        ("alice_nightly", "report", "unknown"),
        ("alice_nightly", "load_1", "safe"),
    ]
    assert out["items"][0]["duplicated_slots"] >= 1
    assert out["items"][1]["duplicated_slots"] == 0


def test_filters_by_verdict_and_dag(ui: UiHarness) -> None:
    """The verdict filter keeps one verdict; a DAG the user may not read empties the list."""
    _seed(ui)
    risky = ui.get("/api/risk", verdict="risky").json()
    assert [t["task_id"] for t in risky["items"]] == ["load_0"]
    assert ui.get("/api/risk", dag_id="bob_ledger").json() == {"total": 0, "items": []}
    page = ui.get("/risk", dag_id="alice_nightly").text
    assert "NaturalKeyMergeOperator" in page
    assert "bob_ledger" not in page


def test_a_new_scan_replaces_the_dags_rows(ui: UiHarness) -> None:
    """Recording a DAG again keeps only its latest verdicts."""
    _seed(ui)
    with ui.store.transaction() as db:
        record(db, [_task("alice_nightly", "load_0", "safe")], scanned_at=time.time())
    out = ui.get("/api/risk").json()
    assert [(t["task_id"], t["verdict"]) for t in out["items"]] == [("load_0", "safe")]
