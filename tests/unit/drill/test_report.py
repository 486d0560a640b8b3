"""The drill's report logic on recorded facts: no Airflow, no database, no process."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from drill.attempts import AttemptFact, TaskFact, attempts_from_tries, overlaps, parse_time
from drill.facts import DrillFacts
from drill.report import inconclusive, render
from drill.writes import DagFacts, FenceFact, WarehouseFacts, broken_invariants, metrics

T0 = 1_796_004_634.0  # recorded on a real drill (2 regions, 30 s loads, scheduler down 14 s)
PREFIXES = ["load_revenue_", "append_lines_", "merge_revenue_", "overwrite_lines_"]


def _reset_task(task_id: str) -> TaskFact:
    """A load reset mid-work: try 1 archived at +24 s but alive until +33.5 s; try 2 from +26 s."""
    return TaskFact(
        task_id,
        "success",
        [
            AttemptFact(1, "failed", T0, T0 + 24.0, log_end=T0 + 33.5),
            AttemptFact(2, "success", T0 + 26.0, T0 + 58.0, log_end=T0 + 58.1),
        ],
    )


def _single(task_id: str) -> TaskFact:
    return TaskFact(task_id, "success", [AttemptFact(1, "success", T0 - 8, T0 - 1, T0 - 1)])


def _dag(side: str, loads: tuple[str, str], warehouse: WarehouseFacts) -> DagFacts:
    """A recorded run of one side: setup and revenue_total once, two regions of each load reset."""
    tasks = [_single("setup"), _single("revenue_total")]
    tasks += [_reset_task(f"{kind}_r0{i}") for kind in loads for i in (1, 2)]
    return DagFacts(f"nightly_revenue_{side}", "success", tasks, warehouse, long_task_prefixes=PREFIXES)


def _plain() -> DagFacts:
    return _dag(
        "plain",
        ("load_revenue", "append_lines"),
        WarehouseFacts(5200.0, 10400.0, [10400.0], 80, 160, 80, 160, 80),
    )


def _crashsafe() -> DagFacts:
    dag = _dag(
        "crashsafe",
        ("merge_revenue", "overwrite_lines"),
        WarehouseFacts(5200.0, 5200.0, [5200.0], 80, 80, 80, 80, 80),
    )
    loads = [t.task_id for t in dag.long_tasks()]
    dag.fences = [FenceFact(t, "target", issued_try=2, committed_try=2, rejected_count=1) for t in loads]
    dag.fences.append(FenceFact("revenue_total", "drill_crashsafe.daily_revenue", 1, 1, 0))
    return dag


def _facts() -> DrillFacts:
    return DrillFacts(_plain(), _crashsafe(), crashed_at=T0 + 3, restarted_at=T0 + 17, wall_seconds=107)


def test_overlap_uses_the_log_end_not_the_archive_time() -> None:
    """A reset attempt lives on after it is archived: the overlap runs to its log's last write."""
    assert overlaps(_reset_task("t")) == [pytest.approx(7.5)]


def test_recorded_crashsafe_run_breaks_no_invariant() -> None:
    """Exact revenue, no duplicates, newest try committed, all success: nothing is broken."""
    assert broken_invariants(_crashsafe()) == []


def test_plain_damage_is_reported_not_judged() -> None:
    """The control's doubled revenue shows in the report; only the crashsafe DAG is judged."""
    text = render(_facts())
    assert "10,400.00 (+100.0 %)" in text
    assert "80 twice" in text
    assert "5,200.00 (exact)" in text
    assert "Crashsafe invariants hold" in text
    assert "plain operators" in text.splitlines()[2]
    assert "crashsafe" in text.splitlines()[2]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: setattr(d.warehouse, "revenue_actual", 5300.0), "revenue 5,300.00 != expected"),
        (lambda d: setattr(d.warehouse, "fact_rows", 81), "1 fact rows counted twice"),
        (lambda d: setattr(d.warehouse, "line_keys", 79), "order-line rows cover 79 of 80"),
        (lambda d: setattr(d.warehouse, "revenue_reported", [5200.0, 5200.0]), "reported revenue"),
        (lambda d: setattr(d.fences[0], "committed_try", 1), "stale overwrite: merge_revenue_r01"),
        (lambda d: setattr(d.fences[0], "committed_try", None), "merge_revenue_r01 (target) never committed"),
        (lambda d: d.fences.pop(0), "no fenced commit recorded for merge_revenue_r01"),
        (lambda d: setattr(d.tasks[0], "final_state", "failed"), "tasks did not end success: setup=failed"),
        (lambda d: setattr(d, "run_state", "failed"), "DAG run ended failed"),
    ],
)
def test_each_broken_promise_is_named(mutate: object, expected: str) -> None:
    """Every crashsafe invariant that breaks is listed with what broke."""
    dag = _crashsafe()
    assert callable(mutate)
    mutate(dag)
    broken = broken_invariants(dag)
    assert any(expected in b for b in broken), broken
    facts = _facts()
    facts.crashsafe = dag
    assert "CRASHSAFE INVARIANTS BROKEN" in render(facts)


def test_a_crash_that_interrupted_nothing_is_inconclusive() -> None:
    """If no load ran twice, the drill proved nothing and says so."""
    facts = _facts()
    assert inconclusive(facts) == []
    assert facts.plain is not None
    facts.plain.tasks = [_single(t.task_id) for t in facts.plain.tasks]
    assert inconclusive(facts) == ["nightly_revenue_plain: no load was reset; the crash interrupted nothing"]


def test_metrics_side_by_side() -> None:
    """The table's rows per DAG: attempts, overlaps, revenue, stale writes, adopted re-runs."""
    plain, safe = metrics(_plain()), metrics(_crashsafe())
    assert plain["loads run more than once"] == safe["loads run more than once"] == "4/4"
    assert plain["attempts (all tasks)"] == "10"
    assert plain["overlapping attempts"] == "4 (max 7.5 s)"
    assert plain["stale writes rejected"] == "n/a (no fencing)"
    assert safe["stale writes rejected"] == "4"
    assert safe["committed by newest attempt"] == "5/5 fenced writes"
    assert "re-runs that adopted in-flight work" not in plain
    assert safe["re-runs that adopted in-flight work"] == "0"


def test_metrics_time_the_run_from_the_restart() -> None:
    """With the restart time known, each side says how long after it its run ended."""
    plain = _plain()
    plain.run_end = 1000.0
    assert metrics(plain, restarted_at=940.0)["run ended, after the restart"] == "60 s"
    assert "run ended, after the restart" not in metrics(plain)


def test_an_adopting_rerun_is_read_from_its_log(tmp_path: Path) -> None:
    """A re-run whose log says it adopted its predecessor's unit is counted as adopted."""
    log_dir = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t"
    log_dir.mkdir(parents=True)
    (log_dir / "attempt=1.log").write_text('{"event":"crashsafe: on_kill: leaving unit u running"}\n')
    (log_dir / "attempt=2.log").write_text('{"event":"crashsafe: d.t: adopted the work of try 1"}\n')
    tries = [
        {"dag_id": "d", "task_id": "t", "try_number": n, "state": s, "start_date": "2026-11-30T02:07:00Z"}
        for n, s in ((1, "failed"), (2, "success"))
    ]
    first, second = attempts_from_tries(tries, tmp_path)
    assert (first.outcome, second.outcome) == (None, "adopted")


def test_facts_round_trip_through_json() -> None:
    """``--facts-json`` output loads back into the same facts."""
    facts = _facts()
    again = DrillFacts.from_json(facts.to_json())
    assert again == facts
    assert again.to_json() == copy.deepcopy(facts).to_json()


def test_attempts_from_tries_skips_attempts_that_never_started() -> None:
    """Tries without a start date (queued, never executed) are not attempts."""
    tries = [
        {"try_number": 2, "state": "success", "start_date": "2026-11-30T02:07:00.5Z", "end_date": None},
        {"try_number": 1, "state": "failed", "start_date": None, "end_date": None},
    ]
    attempts = attempts_from_tries(tries)
    assert [a.try_number for a in attempts] == [2]
    assert attempts[0].start == parse_time("2026-11-30T02:07:00.5Z")


def test_attempt_log_tells_how_a_stale_attempt_ended(tmp_path: Path) -> None:
    """The task log's last write is the attempt's real end; crashsafe's on_kill line marks it cancelled."""
    log_dir = tmp_path / "dag_id=d" / "run_id=r" / "task_id=t"
    log_dir.mkdir(parents=True)
    (log_dir / "attempt=1.log").write_text(
        '{"event":"crashsafe: on_kill: cancelling the running statement"}\n'
    )
    (log_dir / "attempt=2.log").write_text('{"event":"crashsafe: committed"}\n')
    tries = [
        {"dag_id": "d", "task_id": "t", "try_number": n, "state": s, "start_date": "2026-11-30T02:07:00Z"}
        for n, s in ((1, "failed"), (2, "success"))
    ]
    first, second = attempts_from_tries(tries, tmp_path)
    assert (first.outcome, second.outcome) == ("cancelled", None)
    assert first.log_end == pytest.approx((log_dir / "attempt=1.log").stat().st_mtime)
    assert metrics(_crashsafe())["stale attempts cancelled (on_kill)"] == "0"


def test_adopting_reruns_are_not_also_counted_as_finding_the_work_committed() -> None:
    """Try 2 adopted try 1's commit on two loads and found it committed on the other two: 2 and 2."""
    dag = _crashsafe()
    for fence in dag.fences or []:
        if fence.task_id != "revenue_total":
            fence.committed_try, fence.issued_try = 1, 1
    by_task = {t.task_id: t for t in dag.tasks}
    for task_id in ("merge_revenue_r01", "merge_revenue_r02"):
        by_task[task_id].attempts[-1].outcome = "adopted"
    rows = metrics(dag)
    assert rows["re-runs that adopted in-flight work"] == "2"
    assert rows["re-runs that found the work committed"] == "2"  # overwrite_lines_r01, _r02


def test_a_mariadb_warehouse_says_what_it_cannot_show() -> None:
    """--warehouse mariadb: adoption is n/a with its reason, the warehouse is named, the facts round-trip."""
    from drill.writes import MARIADB_NOTES, NO_ADOPTION

    facts = _facts()
    facts.warehouse = "mariadb"
    facts.notes = list(MARIADB_NOTES)
    text = render(DrillFacts.from_json(facts.to_json()))
    adopted = [line for line in text.splitlines() if line.startswith("re-runs that adopted in-flight work")]
    assert len(adopted) == 1
    assert NO_ADOPTION in adopted[0]
    assert "Warehouse on MariaDB" in text
    assert "Note: work meter: not run on MariaDB" in text
    assert "Crashsafe invariants hold" in text
    assert NO_ADOPTION not in render(_facts())
