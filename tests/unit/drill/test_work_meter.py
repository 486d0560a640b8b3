"""The work meter's bookkeeping and arithmetic on hand-made samples, and its failure handling."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from drill.work_meter import (
    LABEL_PREFIX,
    MAX_LABEL_BYTES,
    Execution,
    LabelWork,
    Tally,
    WorkMeter,
    summarize,
)

T0 = 1_796_006_753.0
LABEL = "nightly_revenue_plain/load_revenue_r01"
DAGS_DIR = Path(__file__).resolve().parents[3] / "dags_examples"


def _row(
    pid: int,
    xact: float | None,
    query: float | None,
    at: float,
    label: str = LABEL,
    state: str | None = "active",
) -> tuple[int, str, str | None, float | None, float | None, float]:
    return (pid, LABEL_PREFIX + label, state, xact, query, at)


def _work(label: str, *spans: tuple[float, float]) -> LabelWork:
    return LabelWork(label, [Execution(label, 100 + i, a, b) for i, (a, b) in enumerate(spans)])


def test_samples_of_one_transaction_are_one_execution() -> None:
    """Rows with the same (pid, xact_start) fold into one execution from query_start to the last sample."""
    tally = Tally()
    for at in (T0 + 1, T0 + 2, T0 + 3):
        tally.add([_row(7, T0, T0 + 0.5, at)])
    [execution] = tally.by_label()[LABEL].executions
    assert (execution.pid, execution.started, execution.last_seen, execution.samples) == (
        7,
        T0 + 0.5,
        T0 + 3,
        3,
    )
    assert execution.seconds == pytest.approx(2.5)


def test_later_statements_of_the_same_transaction_do_not_count_again() -> None:
    """A crashsafe write keeps the label for its whole transaction: a later statement is the same unit."""
    tally = Tally()
    tally.add([_row(7, T0, T0 + 0.2, T0 + 1)])
    tally.add([_row(7, T0, T0 + 4.0, T0 + 4.5)])
    [execution] = tally.by_label()[LABEL].executions
    assert execution.started == T0 + 0.2
    assert execution.seconds == pytest.approx(4.3)


def test_a_new_transaction_on_the_same_backend_is_a_new_execution() -> None:
    """Same pid, new xact_start (a re-run on a pooled connection, or a reused pid) is counted apart."""
    tally = Tally()
    tally.add([_row(7, T0, T0, T0 + 1), _row(8, T0 + 0.5, T0 + 0.5, T0 + 1)])
    tally.add([_row(7, T0 + 10, T0 + 10, T0 + 12)])
    work = tally.by_label()[LABEL]
    assert work.count == 3
    assert [e.pid for e in work.executions] == [7, 8, 7]
    assert work.total == pytest.approx(1 + 0.5 + 2)


def test_a_backend_seen_in_one_sample_still_counts_with_its_seconds() -> None:
    """One sample is enough: its seconds run from query_start to that sample, on the server's clock."""
    tally = Tally()
    tally.add([_row(9, None, T0, T0 + 0.2)])
    [execution] = tally.by_label()[LABEL].executions
    assert execution.samples == 1
    assert execution.seconds == pytest.approx(0.2)


def test_hidden_backends_are_counted_not_measured() -> None:
    """A labelled backend whose state the role may not read is a hidden count, not an execution."""
    tally = Tally()
    tally.add([_row(9, None, None, T0, state=None)])
    assert tally.by_label() == {}
    assert tally.hidden == 1


def test_needed_is_the_longest_execution_and_the_rest_is_redone() -> None:
    """Per task needed = longest run, redone = total - needed; per DAG sums and redone % of needed."""
    labels = {
        "d/a": _work("d/a", (T0, T0 + 80), (T0 + 50, T0 + 90)),
        "d/b": _work("d/b", (T0, T0 + 60)),
        "other/c": _work("other/c", (T0, T0 + 5)),
    }
    dags = summarize(labels)
    assert sorted(dags) == ["d", "other"]
    a, b = dags["d"].tasks
    assert (a.task_id, a.executions, a.needed, a.redone) == ("a", 2, 80, 40)
    assert (b.executions, b.needed, b.redone) == (1, 60, 0)
    assert (dags["d"].executions, dags["d"].needed, dags["d"].redone) == (3, 140, 40)
    assert dags["d"].redone_pct == pytest.approx(40 / 140 * 100)
    assert dags["d"].adopted == 0


def test_labels_split_on_the_slash() -> None:
    """Task ids of task groups keep their dots; a label without a slash is filed under DAG ''."""
    dags = summarize({"d.x/group.t": _work("d.x/group.t", (T0, T0 + 1)), "bare": _work("bare", (T0, T0 + 1))})
    assert dags["d.x"].tasks[0].task_id == "group.t"
    assert dags[""].tasks[0].task_id == "bare"
    assert summarize({}) == {}


def test_nothing_needed_has_no_redone_percentage() -> None:
    """A DAG with no measured seconds reports no percentage rather than dividing by zero."""
    dags = summarize({"d/a": _work("d/a", (T0, T0))})
    assert dags["d"].redone_pct is None


@pytest.mark.parametrize(
    ("spans", "rerun", "adopted"),
    [
        pytest.param([(T0, T0 + 90)], T0 + 60, 90, id="in-flight-and-adopted"),
        pytest.param([(T0, T0 + 90), (T0 + 61, T0 + 80)], T0 + 60, 0, id="re-run-redid-it"),
        pytest.param([(T0, T0 + 30)], T0 + 60, 0, id="finished-before-the-re-run"),
        pytest.param([(T0, T0 + 90)], None, 0, id="never-re-run"),
    ],
)
def test_adopted_is_in_flight_work_the_re_run_did_not_redo(
    spans: list[tuple[float, float]], rerun: float | None, adopted: float
) -> None:
    """Adopted: executions in flight at the re-run's start, only when the re-run started none itself."""
    reruns = {} if rerun is None else {"d/a": rerun}
    [task] = summarize({"d/a": _work("d/a", *spans)}, reruns)["d"].tasks
    assert task.adopted == adopted


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_meter_counts_failed_samples_and_never_raises() -> None:
    """An unreachable warehouse only counts failed samples; stop() returns what was (not) seen."""
    meter = WorkMeter(f"postgresql://postgres@127.0.0.1:{_closed_port()}/x", interval=0.02, timeout=1)
    with meter:
        deadline = time.monotonic() + 30
        while meter.snapshot().coverage.failed_samples < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    result = meter.stop()
    assert result.coverage.failed_samples >= 2
    assert result.coverage.samples == 0
    assert result.labels == {}
    assert result.coverage.last_error


def test_a_meter_never_started_stops_empty() -> None:
    """stop() without start() is an empty result, not an error (the drill may fail before the run)."""
    result = WorkMeter("postgresql://nowhere/x").stop()
    assert (result.coverage.samples, result.coverage.failed_samples, result.labels) == (0, 0, {})


def test_drill_labels_fit_in_application_name() -> None:
    """Every long_work label of the drill's DAGs survives PostgreSQL's 63-byte application_name."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_DIR), safe_mode=False)
    labelled = []
    for dag_id in ("nightly_revenue_plain", "nightly_revenue_crashsafe"):
        for task in bag.dags[dag_id].tasks:
            sql = getattr(task, "sql", None)
            if isinstance(sql, str) and "long_work(" in sql:  # setup only creates it
                assert "'{{ ti.dag_id }}/{{ ti.task_id }}'" in sql, task.task_id
                labelled.append(f"{dag_id}/{task.task_id}")
    assert len(labelled) >= 4
    too_long = [label for label in labelled if len(label.encode()) > MAX_LABEL_BYTES]
    assert too_long == []
