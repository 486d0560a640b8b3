"""Classifier tests on recorded timelines, including Airflow issues where attempts overlapped."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_crashsafe.audit.classify import classify, executions_of, risk_of
from airflow_crashsafe.audit.protection import Evidence
from airflow_crashsafe.store.attempts import merge_rows

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def row(
    try_number: int,
    pid: int,
    start: float,
    end: float | None = None,
    *,
    end_source: str | None = None,
    state: str | None = None,
    reported: str | None = None,
    seen: float | None = None,
    clear: int = 0,
    run_id: str = "scheduled__2026-01-01",
    **extra: Any,
) -> dict[str, Any]:
    return {
        "dag_id": "nightly",
        "task_id": "load",
        "map_index": -1,
        "run_id": run_id,
        "try_number": try_number,
        "hostname": "w1",
        "pid": pid,
        "slot_partition": "2026-01-01T00:00:00+00:00",
        "ti_id": f"ti-{try_number}-{pid}",
        "clear_number": clear,
        "started_at": at(start),
        "start_source": "listener",
        "ended_at": at(end) if end is not None else None,
        "end_source": end_source if end is not None else None,
        "state": state,
        "reported_state": reported,
        "last_seen_at": at(seen) if seen is not None else None,
        "replay_safe": False,
        "operator": "x.Op",
        **extra,
    }


def test_reset_while_running_is_an_overlapping_reset_rerun() -> None:
    """Experiment B: try 1 reset at 40 s (history end), beacon alive till 47.4 s, try 2 started at 40 s."""
    rows = [
        row(1, 11, 0, 40, end_source="reconcile", state="failed", seen=47.4),
        row(2, 22, 40, 130, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "reset_rerun")
    assert report.overlap_seconds == 7.4
    assert report.risk == "critical"


def test_reset_without_beacon_evidence_is_a_reset_rerun_only() -> None:
    """With no sign of life after the reset, no overlap is claimed: only evidence counts."""
    rows = [
        row(1, 11, 0, 40, end_source="reconcile", state="failed"),
        row(2, 22, 41, 90, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("reset_rerun",)
    assert report.risk == "high"


def test_broker_redelivery_of_the_same_try_overlaps() -> None:
    """#51962/#54479: one try delivered to two workers runs twice at once."""
    rows = [
        row(1, 11, 0, 60, end_source="listener", reported="success"),
        row(1, 12, 20, 70, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert "same_try_twice" in report.kinds
    assert "overlap" in report.kinds
    assert report.overlap_seconds == 40.0


def test_redelivery_started_before_the_first_succeeded_is_not_a_rerun_after_success() -> None:
    """One try, its second process started before the first succeeded: a redelivery, not a re-run."""
    rows = [
        row(1, 11, 0, 60, end_source="listener", reported="success"),
        row(1, 12, 20, 70, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "same_try_twice")
    assert report.overlap_seconds == 40.0
    assert report.risk == "critical"


def test_redelivery_started_after_the_first_succeeded_is_still_a_redelivery() -> None:
    """One try run again by a second process after the first one's success: same_try_twice, high risk."""
    rows = [
        row(1, 11, 0, 30, end_source="listener", reported="success"),
        row(1, 12, 40, 70, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("same_try_twice",)
    assert report.risk == "high"


def test_success_marked_failed_and_retried_is_a_rerun_after_success() -> None:
    """#63183/#12396: the process reported success, Airflow's verdict became failed, try 2 re-ran it."""
    rows = [
        row(1, 11, 0, 30, end_source="listener", state="failed", reported="success"),
        row(2, 22, 45, 60, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("rerun_after_success",)


def test_clear_while_running_overlaps_and_is_a_clear() -> None:
    """#33282: a clear while try 1 runs starts try 2; try 1 keeps running until its heartbeat is refused."""
    rows = [
        row(1, 11, 0, 20, end_source="reconcile", state="failed", seen=28, clear=0),
        row(2, 22, 21, 50, end_source="listener", reported="success", clear=1),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "rerun_after_clear")
    assert report.overlap_seconds == 7.0


def test_retry_after_failure_is_low_risk() -> None:
    """A failure reported by the process followed by Airflow's retry is a plain retry."""
    rows = [
        row(1, 11, 0, 10, end_source="listener", reported="up_for_retry"),
        row(2, 22, 310, 320, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("retry_after_failure",)
    assert report.risk == "low"


def test_single_execution_and_never_started_tries_are_not_duplicates() -> None:
    """A try that failed while queued (no start) does not make a duplicate."""
    queued = {**row(2, 0, 0), "started_at": None, "start_source": None, "hostname": ""}
    assert classify([row(1, 11, 0, 10, end_source="listener", reported="success"), queued]) == []


def test_history_row_folds_into_the_listener_row_of_its_try() -> None:
    """A reconcile row with another hostname for the same try is the same execution, not a redelivery."""
    history = {
        **row(1, 99, 0, 40, end_source="reconcile", state="failed"),
        "start_source": "reconcile",
        "hostname": "w1.example",
    }
    rows = [row(1, 11, 0), history, row(2, 22, 40, 50, end_source="listener", reported="success")]
    [report] = classify(rows)
    assert len(report.executions) == 2
    assert report.kinds == ("reset_rerun",)


def test_protection_fenced_ledgered_declared_and_unprotected() -> None:
    """Fence events or ledger entries of the slot protect it; a declaration does; else risk stays."""
    rows = [
        row(1, 11, 0, 40, end_source="reconcile", state="failed", seen=45),
        row(2, 22, 40, 60, end_source="listener", reported="success"),
    ]
    event = {
        "kind": "committed",
        "dag_id": "nightly",
        "task_id": "load",
        "map_index": -1,
        "run_id": "scheduled__2026-01-01",
        "slot_partition": "2026-01-01T00:00:00+00:00",
    }
    [fenced] = classify(rows, Evidence([event], []))
    assert (fenced.protection, fenced.risk) == ("fenced", "none")
    [ledgered] = classify(rows, Evidence([], [{**event, "kind": None}]))
    assert ledgered.protection == "ledgered"
    declared = [{**r, "replay_safe": True} for r in rows]
    [safe] = classify(declared, Evidence([], []))
    assert safe.protection == "declared_replay_safe"
    [bare] = classify(rows, Evidence([], []))
    assert (bare.protection, bare.risk) == ("unprotected", "critical")


def test_risk_levels() -> None:
    """Risk: unprotected and re-run; critical when overlapping; nothing when protected."""
    assert risk_of("unprotected", ["overlap", "reset_rerun"]) == "critical"
    assert risk_of("unprotected", ["rerun_after_success"]) == "high"
    assert risk_of("unprotected", ["retry_after_failure"]) == "low"
    assert risk_of("fenced", ["overlap"]) == "none"


def _history(try_number: int, start: float, end: float) -> dict[str, Any]:
    """What reconcile stores from Airflow's history: a reset try archived as ``failed`` at ``end``."""
    return {
        **row(try_number, 11, start, end, end_source="reconcile", state="failed"),
        "start_source": "reconcile",
        "reported_state": None,
        "last_seen_at": None,
    }


def test_stale_attempt_failed_by_on_kill_is_an_overlapping_reset_not_a_retry() -> None:
    """Reset at 40, try 2 at 41, try 1's on_kill makes its own process fail at 43.5: reset, 2.5 s overlap."""
    worker = row(1, 11, 0, 43.5, end_source="listener", reported="up_for_retry", seen=43.5)
    successor = row(2, 22, 41, 90, end_source="listener", reported="success")
    for merged in (merge_rows(worker, _history(1, 0, 40)), merge_rows(_history(1, 0, 40), worker)):
        assert (merged["ended_at"], merged["end_source"]) == (at(43.5), "listener")
        [report] = classify([merged, successor])
        assert report.kinds == ("overlap", "reset_rerun")
        assert report.overlap_seconds == 2.5
        assert report.risk == "critical"


def test_end_after_the_successors_start_overlaps_whatever_its_source() -> None:
    """An end recorded by the scheduler after try 2 started is evidence of life like a beacon."""
    rows = [
        row(1, 11, 0, 50, end_source="scheduler", state="failed"),
        row(2, 22, 45, 90, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "reset_rerun")
    assert report.overlap_seconds == 5.0


def test_beacon_after_the_successors_start_makes_a_failed_try_a_reset() -> None:
    """Own failure reported at 38 but a beacon at 42 after try 2 started at 41: replaced while alive."""
    rows = [
        row(1, 11, 0, 38, end_source="listener", state="failed", reported="up_for_retry", seen=42),
        row(2, 22, 41, 90, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "reset_rerun")
    assert report.overlap_seconds == 1.0


def test_failed_try_cleared_while_alive_stays_a_rerun_after_clear() -> None:
    """A clear (``clear_number`` grew) outranks "alive after the successor started": overlap + clear."""
    rows = [
        row(1, 11, 0, 25, end_source="listener", reported="failed", seen=25, clear=0),
        row(2, 22, 21, 50, end_source="listener", reported="success", clear=1),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "rerun_after_clear")
    assert report.overlap_seconds == 4.0


def test_redelivered_try_alive_after_the_other_is_not_called_a_reset() -> None:
    """Two processes of one try (failed, then success): same_try_twice + overlap, not a reset or a retry."""
    rows = [
        row(1, 11, 0, 30, end_source="listener", reported="up_for_retry"),
        row(1, 12, 20, 40, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "same_try_twice")


def test_retryable_failure_ended_before_the_successor_stays_a_retry() -> None:
    """``up_for_retry`` reported before try 2 started, no later sign of life: a plain retry, 0 s delay too."""
    rows = [
        row(1, 11, 0, 40, end_source="listener", state="failed", reported="up_for_retry", seen=40),
        row(2, 22, 41.5, 60, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("retry_after_failure",)
    assert report.risk == "low"


def test_stale_attempt_stopped_before_its_successor_started_is_a_reset_not_a_retry() -> None:
    """SIGTERM at 39.5 (stale heartbeat), on_kill fails it at 40, try 2 starts at 42: a reset re-run."""
    rows = [
        row(1, 11, 0, 40, end_source="listener", reported="up_for_retry", seen=40, terminated_at=at(39.5)),
        row(2, 22, 42, 90, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("reset_rerun",)
    assert report.overlap_seconds == 0.0
    assert report.risk == "high"


def test_stale_attempt_dying_after_its_successor_started_overlaps_by_its_last_beacon() -> None:
    """Reset archived try 1 at 40; SIGTERM 43, dying beacons to 47.8 (SIGKILL); try 2 from 41: 6.8 s."""
    worker = row(1, 11, 0, seen=47.8, terminated_at=at(43))
    merged = merge_rows(worker, _history(1, 0, 40))
    assert (merged["ended_at"], merged["end_source"]) == (at(47.8), "reconcile")
    [report] = classify([merged, row(2, 22, 41, 90, end_source="listener", reported="success")])
    assert report.kinds == ("overlap", "reset_rerun")
    assert report.overlap_seconds == 6.8


def test_stale_attempt_reporting_success_after_its_successor_started_is_a_reset() -> None:
    """Its work finished between SIGTERM and SIGKILL: a late success hook, still an overlapping reset."""
    rows = [
        row(1, 11, 0, 44, end_source="listener", reported="success", seen=44, terminated_at=at(42)),
        row(2, 22, 41, 90, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("overlap", "reset_rerun")
    assert report.overlap_seconds == 3.0


def test_sigterm_then_a_retry_after_its_delay_stays_a_retry() -> None:
    """A worker shut down (SIGTERM) fails the try; Airflow retries 5 min later: a plain retry."""
    rows = [
        row(1, 11, 0, 40, end_source="listener", reported="up_for_retry", seen=40, terminated_at=at(39)),
        row(2, 22, 340, 400, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("retry_after_failure",)


def test_sigterm_after_its_own_end_is_not_a_stale_stop() -> None:
    """task_success_overtime SIGTERMs a finished process: its failure before that stays a failure."""
    rows = [
        row(1, 11, 0, 40, end_source="listener", reported="up_for_retry", seen=41, terminated_at=at(41)),
        row(2, 22, 41.5, 60, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert report.kinds == ("retry_after_failure",)


def test_airflows_end_never_lies_before_the_processes_last_sign_of_life() -> None:
    """A reconcile or scheduler end earlier than a beacon moves to it; the process's own end stays."""
    for source in ("reconcile", "scheduler"):
        estimated = row(1, 11, 0, 40, end_source=source, state="failed", seen=46)
        assert merge_rows(estimated, estimated)["ended_at"] == at(46)
    own = row(1, 11, 0, 40, end_source="listener", reported="failed", seen=46)
    assert merge_rows(own, own)["ended_at"] == at(40)


def test_a_deferred_try_resumed_in_another_process_is_one_execution() -> None:
    """Try 2 defers at 50 (pid 22) and resumes at 120 (pid 33): with try 1 reset, one re-run, not two."""
    rows = [
        row(1, 11, 0, seen=47, terminated_at=at(44)),
        row(2, 22, 41, 50, end_source="listener", reported="deferred", seen=50),
        row(2, 33, 41, 180, end_source="listener", reported="success", seen=180, resumed=True),
    ]
    [report] = classify(rows)
    assert len(report.executions) == 2
    assert report.kinds == ("overlap", "reset_rerun")
    resumed = report.executions[1]
    assert (resumed.pid, resumed.started_at, resumed.ended_at, resumed.state) == (
        33,
        at(41),
        at(180),
        "success",
    )


def test_a_rescheduled_sensor_still_poking_has_no_end_yet() -> None:
    """A sensor rescheduled at 30 (pid 11) pokes again from 90 (pid 12), still running: one open execution."""
    rows = [
        row(1, 11, 0, 30, end_source="listener", reported="up_for_reschedule"),
        row(1, 12, 90, seen=95),
    ]
    assert classify(rows) == []
    [one] = executions_of(rows)
    assert (one.pid, one.started_at, one.ended_at, one.state, one.alive_until) == (
        12,
        at(0),
        None,
        None,
        at(95),
    )


def test_two_processes_of_one_try_without_a_suspension_stay_a_redelivery() -> None:
    """Only a deferral or a reschedule joins processes: a broker redelivery is still two executions."""
    rows = [
        row(1, 11, 0, 30, end_source="listener", reported="success"),
        row(1, 12, 10, 40, end_source="listener", reported="success"),
    ]
    [report] = classify(rows)
    assert "same_try_twice" in report.kinds


def _drill_try_2(*, suspension: bool) -> list[dict[str, Any]]:
    """merge_revenue_r02 of the drill: try 1 reset (pid 31605); try 2 defers (31820), resumes (32041).

    The resumed process records the try's original start (41.1), stamped before the first process
    registered, so a little before that process's own start (42.2).
    """
    part = row(2, 31820, 42.2, seen=55.9, ti_id="ti-2")
    if suspension:
        part = merge_rows(
            part, {**part, "ended_at": at(55.9), "end_source": "listener", "reported_state": "deferred"}
        )
    return [
        row(1, 31605, 0, 140, end_source="reconcile", state="failed", seen=138, ti_id="ti-1"),
        part,
        row(
            2,
            32041,
            41.1,
            190,
            end_source="listener",
            reported="success",
            seen=190,
            ti_id="ti-2",
            resumed=True,
        ),
    ]


def test_a_resumed_try_whose_suspension_record_is_missing_is_still_one_execution() -> None:
    """The losing order of the drill: the stop never reached the store; not 3 runs, not same_try_twice."""
    [report] = classify(_drill_try_2(suspension=False))
    assert [e.pid for e in report.executions] == [31605, 32041]
    assert report.kinds == ("overlap", "reset_rerun")
    resumed = report.executions[1]
    assert (resumed.started_at, resumed.ended_at, resumed.state) == (at(41.1), at(190), "success")
    assert report.overlap_seconds == round(140 - 41.1, 3)


def test_a_late_suspension_record_changes_nothing() -> None:
    """Stored late (delivered from the spool) or in time, the suspension gives the same verdict."""
    [without] = classify(_drill_try_2(suspension=False))
    [with_it] = classify(_drill_try_2(suspension=True))
    assert with_it.executions == without.executions
    assert with_it.reruns == without.reruns


def test_a_process_starting_its_try_again_later_is_not_read_as_a_resume() -> None:
    """A second process of one try with its own later start (a redelivery) stays a try run twice."""
    rows = [
        row(1, 11, 0, 100, end_source="listener", reported="success", ti_id="ti-1"),
        row(1, 12, 60, seen=70, ti_id="ti-1"),
    ]
    [report] = classify(rows)
    assert "same_try_twice" in report.kinds
    assert len(report.executions) == 2


def test_a_try_deferred_twice_with_both_stops_missing_is_one_execution() -> None:
    """Both resumed processes record the original start; each stopped part joins the one after it."""
    rows = [
        row(1, 21, 1.0, seen=10, ti_id="ti-1"),
        row(1, 22, 0.0, seen=40, ti_id="ti-1", resumed=True),
        row(1, 23, 0.0, 90, end_source="listener", reported="success", seen=90, ti_id="ti-1", resumed=True),
    ]
    assert classify(rows) == []
    [one] = executions_of(rows)
    assert (one.pid, one.started_at, one.ended_at) == (23, at(0), at(90))


def test_a_second_start_of_one_try_soon_after_the_first_is_a_redelivery_whichever_dies_first() -> None:
    """A process starting the try 5 s after the first (not resuming it) stays a try run twice."""
    second_lost = [
        row(1, 11, 0, 100, end_source="listener", reported="success", seen=100, ti_id="ti-1"),
        row(1, 12, 5, seen=10, ti_id="ti-1", resumed=False),
    ]
    first_lost = [
        row(1, 11, 0, seen=6, ti_id="ti-1", resumed=False),
        row(1, 12, 5, 100, end_source="listener", reported="success", seen=100, ti_id="ti-1", resumed=False),
    ]
    for rows in (second_lost, first_lost):
        [report] = classify(rows)
        assert [e.pid for e in report.executions] == [11, 12]
        assert report.kinds == ("overlap", "same_try_twice")


def test_a_second_start_recording_the_tries_start_date_is_no_resume_unless_it_resumed() -> None:
    """Timing alone joins nothing: the resumer's skewed start without its resume record is a redelivery."""
    rows = _drill_try_2(suspension=False)
    rows[-1] = {**rows[-1], "resumed": False}
    [report] = classify(rows)
    assert sorted(e.pid for e in report.executions) == [31605, 31820, 32041]
    assert "same_try_twice" in report.kinds


def test_rows_recorded_without_the_resume_flag_join_nothing_by_time() -> None:
    """A suspension-less pair from before the audit kept ``resumed`` is reported, not hidden."""
    rows = _drill_try_2(suspension=False)
    rows[-1] = {k: v for k, v in rows[-1].items() if k != "resumed"}
    [report] = classify(rows)
    assert len(report.executions) == 3


def test_a_recorded_deferral_joins_the_process_that_resumed_it_not_a_redelivery() -> None:
    """Two later processes of a deferred try: the stop joins the resumer, the redelivered one stays apart."""
    rows = [
        row(1, 11, 0, 20, end_source="listener", reported="deferred", seen=20, ti_id="ti-1"),
        row(1, 12, 22, seen=30, ti_id="ti-1", resumed=False),
        row(1, 13, 0, 90, end_source="listener", reported="success", seen=90, ti_id="ti-1", resumed=True),
    ]
    [report] = classify(rows)
    by_pid = {e.pid: e for e in report.executions}
    assert set(by_pid) == {12, 13}
    assert by_pid[13].started_at == at(0)
    assert "same_try_twice" in report.kinds


def test_a_lost_hosts_try_failed_by_the_heartbeat_timeout_then_retried_is_a_crash_rerun() -> None:
    """Host lost at 20 (last beacon); the scheduler fails the try at 45 and retries it: a reset re-run."""
    lost = merge_rows(
        row(1, 11, 0, seen=20, hostname="worker-b"),
        {
            **row(1, 11, 0, 45, end_source="scheduler", state="up_for_retry", hostname="worker-b"),
            "start_source": "scheduler",
        },
    )
    rows = [lost, row(2, 22, 47, 90, end_source="listener", reported="success", hostname="worker-a")]
    [report] = classify(rows)
    assert report.kinds == ("reset_rerun",)
    assert report.risk == "high"
    assert [e.hostname for e in report.executions] == ["worker-b", "worker-a"]


def test_a_failure_the_process_reported_itself_stays_a_low_risk_retry() -> None:
    """The same timeline with the process's own failure recorded (and the scheduler's verdict): a retry."""
    own = row(1, 11, 0, 44, end_source="listener", reported="up_for_retry", seen=44)
    verdict = {**row(1, 11, 0, 45, end_source="scheduler", state="up_for_retry"), "start_source": "scheduler"}
    [report] = classify(
        [merge_rows(own, verdict), row(2, 22, 47, 90, end_source="listener", reported="success")]
    )
    assert report.kinds == ("retry_after_failure",)
    assert report.risk == "low"
