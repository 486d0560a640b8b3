"""The warehouse-work report section on hand-made meter results: no database, no thread."""

from __future__ import annotations

import json

from drill.attempts import AttemptFact, TaskFact
from drill.work import WorkReport, rerun_starts
from drill.work_meter import Coverage, Execution, LabelWork, MeterResult
from drill.writes import DagFacts, WarehouseFacts

T0 = 1_796_006_753.0
DAG_IDS = {"plain": "nightly_revenue_plain", "crashsafe": "nightly_revenue_crashsafe"}


def _label(label: str, *spans: tuple[float, float]) -> LabelWork:
    return LabelWork(label, [Execution(label, 10 + i, a, b) for i, (a, b) in enumerate(spans)])


def _result(failed: int = 0, hidden: int = 0) -> MeterResult:
    labels = [
        _label("nightly_revenue_plain/load_revenue_r01", (T0, T0 + 80), (T0 + 55, T0 + 95)),
        _label("nightly_revenue_plain/append_lines_r01", (T0, T0 + 70), (T0 + 55, T0 + 75)),
        _label("nightly_revenue_crashsafe/merge_revenue_r01", (T0, T0 + 90)),
        _label("nightly_revenue_crashsafe/overwrite_lines_r01", (T0, T0 + 30)),
        _label("some_other_dag/t", (T0, T0 + 5)),
    ]
    error = "OperationalError: gone" if failed else None
    return MeterResult({w.label: w for w in labels}, Coverage(0.25, 400, failed, hidden, error))


def _report(**kwargs: int) -> WorkReport:
    reruns = {"nightly_revenue_crashsafe/merge_revenue_r01": T0 + 55}
    return WorkReport.build(_result(**kwargs), DAG_IDS, reruns)


def test_totals_are_side_by_side() -> None:
    """Executions, needed, redone, redone % and adopted appear per side under the report's titles."""
    lines = _report().lines()
    assert "(pg_stat_activity every 0.25 s, 400 samples)" in lines[0]
    by_name = {line.split("  ")[1]: line for line in lines[2:7]}
    assert "plain operators" in lines[1]
    assert lines[1].index("plain operators") < lines[1].index("crashsafe")
    assert by_name["executions"].split()[1:] == ["4", "for", "2", "tasks", "2", "for", "2", "tasks"]
    assert by_name["needed s"].split()[2:] == ["150", "120"]
    assert by_name["redone s"].split()[2:] == ["60", "0"]
    assert by_name["redone % of needed"].split()[4:] == ["40.0", "%", "0.0", "%"]
    assert by_name["taken over s"].split()[3:] == ["0", "90"]


def test_only_tasks_that_ran_twice_or_adopted_are_listed() -> None:
    """Per DAG, tasks run more than once (or that adopted work) get a row; the others are counted."""
    text = "\n".join(_report().lines())
    assert "nightly_revenue_plain: 2 of 2 tasks executed more than once" in text
    assert "load_revenue_r01  2     80.0, 40.0" in text
    assert (
        "nightly_revenue_crashsafe: 0 of 2 tasks executed more than once, 1 took over in-flight work" in text
    )
    assert "merge_revenue_r01" in text
    assert "overwrite_lines_r01" not in text
    assert "some_other_dag" not in text


def test_a_side_with_nothing_measured_says_so() -> None:
    """A DAG the meter never saw reports 0 executions and no percentage, not a crash."""
    report = WorkReport.build(MeterResult({}, Coverage(0.25)), DAG_IDS)
    text = "\n".join(report.lines())
    assert "0 for 0 tasks" in text
    assert "n/a" in text


def test_failed_and_hidden_samples_are_warned_about() -> None:
    """A meter that could not see everything says so in the report."""
    clean = "\n".join(_report().lines())
    assert "WARNING" not in clean
    text = "\n".join(_report(failed=3, hidden=2).lines())
    assert "WARNING: 3 samples failed (last: OperationalError: gone)" in text
    assert "WARNING: 2 sightings of labelled backends were hidden" in text


def test_facts_round_trip_through_json() -> None:
    """to_facts() is JSON-ready and from_facts() renders the same section."""
    report = _report(failed=1)
    raw = json.loads(json.dumps(report.to_facts()))
    assert raw["sides"]["plain"]["redone"] == 60
    assert raw["sides"]["plain"]["redone_pct"] == 40.0
    assert raw["sides"]["crashsafe"]["adopted"] == 90
    assert raw["sides"]["plain"]["tasks"][1]["seconds"] == [80.0, 40.0]
    assert WorkReport.from_facts(raw).lines() == report.lines()


def test_rerun_starts_are_the_second_attempts_start() -> None:
    """Only tasks with a started second attempt get a re-run time, keyed by dag_id/task_id."""
    dag = DagFacts(
        dag_id="d",
        run_state="success",
        tasks=[
            TaskFact(
                "reset",
                "success",
                [AttemptFact(1, "failed", T0, T0 + 5), AttemptFact(2, "success", T0 + 9, None)],
            ),
            TaskFact("once", "success", [AttemptFact(1, "success", T0, T0 + 5)]),
            TaskFact(
                "never", "success", [AttemptFact(1, "failed", T0, None), AttemptFact(2, None, None, None)]
            ),
        ],
        warehouse=WarehouseFacts(0, 0, [], 0, 0, 0, 0, 0),
    )
    assert rerun_starts(dag) == {"d/reset": T0 + 9}
