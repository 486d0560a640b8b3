"""The drill's audit capability: per reset pair, the measured overlap and its classification."""

from __future__ import annotations

from airflow_crashsafe.audit.classify import classify
from airflow_crashsafe.store.attempts import merge_rows
from drill.audit import AuditFact, ResetPair, audit_lines, fact_from_report, reset_pairs, reset_summary
from tests.unit.audit.test_classify import _history, at, row


def test_reset_pairs_carry_the_measured_overlap_and_the_classification() -> None:
    """A load killed 6.8 s into its successor is an overlapping reset re-run; one stopped before is not."""
    killed = merge_rows(row(1, 11, 0, seen=47.8, terminated_at=at(43)), _history(1, 0, 40))
    overlapping = classify([killed, row(2, 22, 41, 90, end_source="listener", reported="success")])
    stopped = [
        {**r, "task_id": "append"}
        for r in (
            row(1, 13, 0, 40, end_source="listener", reported="failed", seen=40, terminated_at=at(39.5)),
            row(2, 24, 42, 90, end_source="listener", reported="success"),
        )
    ]
    reports = overlapping + classify(stopped)
    assert [p for r in reports for p in reset_pairs(r)] == [
        ResetPair("load", "w1 11", "w1 22", 6.8, "overlapping reset re-run"),
        ResetPair("append", "w1 13", "w1 24", 0.0, "reset re-run"),
    ]
    fact = fact_from_report(reports[0])
    assert {"reset_rerun", "overlap"} <= set(fact.kinds)
    assert fact.overlap_seconds == 6.8
    assert reset_summary("plain", reports) == "plain: 2 reset re-runs, 1 overlapping (6.8-6.8 s)"


def test_a_plain_retry_is_no_reset_pair() -> None:
    """A retry after a reported failure is not counted among the reset re-runs."""
    [retry] = classify(
        [
            row(1, 11, 0, 40, end_source="listener", reported="up_for_retry", seen=40),
            row(2, 22, 340, 400, end_source="listener", reported="success"),
        ]
    )
    assert reset_pairs(retry) == []
    assert reset_summary("crashsafe", [retry]) == "crashsafe: 0 reset re-runs, 0 overlapping"


def test_audit_lines_mark_unprotected_reruns_harmful() -> None:
    """Unprotected re-runs read HARMFUL with their risk; fenced or ledgered ones read harmless."""
    facts = [
        AuditFact(
            "load_revenue_r01",
            2,
            ["vm 10", "vm 20"],
            3.2,
            ["overlap", "reset_rerun"],
            "unprotected",
            "critical",
        ),
        AuditFact("merge_revenue_r01", 2, ["vm 11", "vm 21"], 0.0, ["reset_rerun"], "fenced", "none"),
    ]
    text = "\n".join(audit_lines("d", facts))
    assert "HARMFUL (critical risk)" in text
    assert "harmless" in text
    assert "vm 10, vm 20" in text
