"""The scan's fix texts, applied as written to example DAGs, parse with Airflow and clear the finding.

``tests/data/scan_fixes/`` holds each task before and after its fix; the runs of the fixed tasks
are in tests/integration/scan/test_fixes_run.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_crashsafe.scan import ScanResult, scan_paths
from airflow_crashsafe.scan.model import TaskVerdict

FIXES = Path(__file__).resolve().parents[2] / "data" / "scan_fixes"


@pytest.fixture(scope="module")
def scanned() -> ScanResult:
    return scan_paths([str(FIXES)])


def verdict(result: ScanResult, dag_id: str, task_id: str) -> TaskVerdict:
    return next(t for t in result.tasks if (t.dag_id, t.task_id) == (dag_id, task_id))


def applied(fix: str) -> str:
    """The code of a fix: what stands before its explanation."""
    for cut in (" (from ", ": a re-run ", " — "):
        fix = fix.split(cut)[0]
    return fix


def test_every_example_parses(scanned: ScanResult) -> None:
    """Each before- and after-file imports with Airflow's DagBag: no import errors."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(FIXES), safe_mode=False)
    assert bag.import_errors == {}
    assert len(bag.dags) == 11
    assert scanned.import_errors == []


def test_http_operator_fix_is_the_after_file(scanned: ScanResult) -> None:
    """The IdempotentHttpOperator the scan names, with the task's own arguments, is what protects it."""
    before = verdict(scanned, "fix_http_operator_before", "book_payout")
    assert (before.verdict, before.category) == ("risky", "http_mutating")
    assert applied(before.fix).startswith("IdempotentHttpOperator(task_id='book_payout'")
    assert applied(before.fix) in (FIXES / "http_operator_after.py").read_text()
    assert verdict(scanned, "fix_http_operator_after", "book_payout").verdict == "protected"


def test_trigger_fix_carries_skip_when_already_exists(scanned: ScanResult) -> None:
    """A run-derived id alone is not safe (a re-run fails); the fix adds skip_when_already_exists=True."""
    before = verdict(scanned, "fix_trigger_before", "kick_reports")
    assert (before.verdict, before.category) == ("unknown", "trigger_rerun_fails")
    assert "skip_when_already_exists=True" in before.fix
    assert applied(before.fix) in (FIXES / "trigger_after.py").read_text()
    after = verdict(scanned, "fix_trigger_after", "kick_reports")
    assert (after.verdict, after.category) == ("safe", "run_keyed")


def test_callback_fix_keeps_effect_out_of_the_dag_callback(scanned: ScanResult) -> None:
    """A function that is also the DAG's on_failure_callback is not told to hold effect() itself."""
    before = verdict(scanned, "fix_callback_before", "page_oncall")
    assert before.verdict == "risky"
    assert before.fix.startswith("leave alert_oncall() as it is")
    assert 'with effect("page_oncall", context=context)' in before.fix
    after_text = (FIXES / "callback_after.py").read_text()
    assert 'with effect("page_oncall", context=context) as fx:' in after_text
    assert "on_failure_callback=alert_oncall" in after_text
    after = verdict(scanned, "fix_callback_after", "page_oncall")
    assert (after.verdict, after.fix) == ("protected", "")


def test_task_post_fix_wraps_the_call_in_effect(scanned: ScanResult) -> None:
    """A POST in a task callable is told to go inside effect() with its key; applied, it is protected."""
    before = verdict(scanned, "fix_task_post_before", "push_invoice")
    assert (before.verdict, before.category) == ("risky", "http_mutating")
    assert before.fix.startswith('wrap the call: with effect("push_invoice"')
    assert 'headers={"Idempotency-Key": fx.key}' in before.fix
    assert verdict(scanned, "fix_task_post_after", "push_invoice").verdict == "protected"


def test_token_fetch_gets_no_fix(scanned: ScanResult) -> None:
    """A token request is a read: safe, and no fix that would ledger it (a replay must fetch a fresh one)."""
    for task_id in ("get_token", "fetch_token_operator"):
        found = verdict(scanned, "fix_token_fetch", task_id)
        assert (found.verdict, found.category, found.fix) == ("safe", "http_read", "")


def test_sql_fix_fits_the_engine(scanned: ScanResult) -> None:
    """crashsafe's operators are named for PostgreSQL; BigQuery, which they do not write to, gets a MERGE."""
    pg = verdict(scanned, "fix_warehouse_sql_before", "append_sales_pg")
    bq = verdict(scanned, "fix_warehouse_sql_before", "append_sales_bq")
    assert pg.fix.startswith("NaturalKeyMergeOperator(conn_id='postgres_dwh', target_table='mart.sales'")
    assert "Operator" not in bq.fix
    assert bq.fix.startswith("rewrite it as MERGE INTO mart.sales")
    assert verdict(scanned, "fix_warehouse_sql_after", "append_sales_pg").verdict == "protected"
    assert verdict(scanned, "fix_warehouse_sql_after", "append_sales_bq").verdict == "safe"
