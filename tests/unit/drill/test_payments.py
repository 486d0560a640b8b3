"""The drill's payment capability on recorded facts: rows, invariants, the verdict's explanation."""

from __future__ import annotations

from drill.attempts import STOPPED_FOR_PERSON, AttemptFact, TaskFact, stopped_for_person
from drill.facts import DrillFacts
from drill.payments import PaymentFact, payment_invariants, payment_rows
from drill.report import all_broken, render
from drill.writes import DagFacts, WarehouseFacts, broken_invariants

T0 = 1_796_006_753.0


def _task(task_id: str, state: str = "success", outcome: str | None = None) -> TaskFact:
    return TaskFact(
        task_id,
        state,
        [AttemptFact(1, "failed", T0, T0 + 5), AttemptFact(2, state, T0 + 20, T0 + 40, outcome=outcome)],
    )


def _crashsafe(run_state: str = "failed", naive_outcome: str | None = "outcome_unknown") -> DagFacts:
    return DagFacts(
        dag_id="nightly_revenue_crashsafe",
        run_state=run_state,
        tasks=[_task("push_payment_keyed_p01"), _task("push_payment_naive_p01", "failed", naive_outcome)],
        warehouse=WarehouseFacts(100.0, 100.0, [100.0], 4, 4, 4, 4, 4),
        fences=[],
        long_task_prefixes=["merge_revenue_"],
    )


def _payments(booked_naive: int = 1) -> list[PaymentFact]:
    return [
        PaymentFact("naive", "p01", "push_payment_naive_p01", received=1, booked=booked_naive, keys=1),
        PaymentFact("keyed", "p01", "push_payment_keyed_p01", received=4, booked=1, keys=1),
    ]


def test_outcome_unknown_stop_is_not_a_broken_invariant() -> None:
    """A push stopped for a person may fail the task and the run; that alone breaks nothing."""
    dag = _crashsafe()
    assert stopped_for_person(dag.tasks[1])
    assert broken_invariants(dag) == []


def test_other_failures_still_break_the_invariants() -> None:
    """A push that failed for another reason, or a failed run with nothing stopped, is a break."""
    broken = broken_invariants(_crashsafe(naive_outcome=None))
    assert any("DAG run ended failed" in b for b in broken)
    assert any("push_payment_naive_p01=failed" in b for b in broken)


def test_a_double_booking_breaks_the_payment_invariant() -> None:
    """booked > intended for any crashsafe payment is a broken invariant; booked == intended is not."""
    assert payment_invariants(_payments()) == []
    assert payment_invariants(_payments(booked_naive=2)) == [
        "naive vendor booked payment p01 2 times for 1 intended (push_payment_naive_p01)"
    ]
    facts = DrillFacts(None, _crashsafe(), T0, T0 + 40, payments={"crashsafe": _payments(2)})
    assert len(all_broken(facts)) == 1


def test_payment_rows_per_vendor() -> None:
    """Rows say, per vendor, intended, received (and keys), booked (twice flagged), and how pushes ended."""
    rows = payment_rows(_payments(), _crashsafe())
    assert rows["keyed vendor: requests received"] == "4 under 1 keys"
    assert rows["naive vendor: payments booked"] == "1"
    assert rows["naive vendor: pushes ended"] == f"1 {STOPPED_FOR_PERSON}"
    plain = [PaymentFact("naive", "p01", "t", received=2, booked=2, keys=0)]
    assert payment_rows(plain, None)["naive vendor: payments booked"] == "2 (1 paid twice)"
    assert payment_rows(plain, None)["naive vendor: requests received"] == "2 (no key)"


def test_render_says_why_the_crashsafe_run_failed() -> None:
    """The report names the stopped push and says the failed run is on purpose."""
    facts = DrillFacts(None, _crashsafe(), T0, T0 + 40, payments={"crashsafe": _payments()})
    text = render(facts)
    assert "Crashsafe invariants hold" in text
    assert "ends failed on purpose: push_payment_naive_p01" in text
