"""The fleet drill's watchdog verdict and redelivery rows, judged from recorded facts (no fleet)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from drill.attempts import AttemptFact, TaskFact
from drill.facts import DrillFacts
from drill.fleet_redelivery import guard_counts, log_offsets
from drill.fleet_report import FleetFact
from drill.fleet_watch import Watched
from drill.report import all_broken, render
from drill.writes import DagFacts, WarehouseFacts

T0 = 1_796_004_634.0


def _alert(key: str, severity: str, after: float, event: str = "trigger") -> dict[str, Any]:
    return {
        "event": event,
        "key": key,
        "severity": severity,
        "summary": f"{key} {severity}",
        "after_s": after,
    }


def _facts(scenario: str, alerts: list[dict[str, Any]], tasks: list[TaskFact] | None = None) -> DrillFacts:
    wh = WarehouseFacts(2670.0, 2670.0, [2670.0], 40, 40, 40, 40, 40)
    dag = DagFacts("nightly_revenue_crashsafe", "success", tasks or [], wh, [], ["merge_revenue_"])
    host = "worker-b" if scenario == "redelivery" else ""
    faulted = {"crashsafe": [t.task_id for t in tasks or []]}
    fleet = FleetFact(scenario, host, T0, T0 + 60, faulted if host else {})
    fleet.watched = Watched("polls every 10 s, threshold 30 s", T0, alerts)
    return DrillFacts(None, dag, T0, T0 + 60, fleet=fleet)


REPLICA = _alert("scheduler_replica_dead:7", "warning", 33.0)
PAGE = _alert("scheduler_dead", "critical", 35.0)


def _row(text: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith("watchdog (whole fleet)")]
    return line


def test_one_scheduler_down_warns_without_a_page_and_the_table_says_so() -> None:
    """(a): the replica warning holds, shown in the table; the facts round-trip through JSON."""
    facts = DrillFacts.from_json(_facts("one-scheduler", [REPLICA]).to_json())
    assert all_broken(facts) == []
    assert _row(render(facts)).endswith("warning one replica down +33 s, no page")


@pytest.mark.parametrize(
    ("alerts", "broken"),
    [
        ([], "did not warn"),
        ([REPLICA, PAGE], "paged 'scheduler dead' while one scheduler of two still ran"),
        ([_alert("scheduler_replica_dead:7", "warning", 40.0, event="resolve")], "did not warn"),
    ],
)
def test_one_scheduler_down_without_its_warning_or_with_a_page_is_broken(
    alerts: list[dict[str, Any]], broken: str
) -> None:
    """(a): no warning, or a page, breaks the watchdog's promise."""
    assert any(broken in b for b in all_broken(_facts("one-scheduler", alerts)))


def test_both_schedulers_down_must_page() -> None:
    """(b): the page holds; a warning alone is broken."""
    assert all_broken(_facts("schedulers-down", [PAGE])) == []
    assert _row(render(_facts("schedulers-down", [PAGE]))).endswith("PAGE scheduler dead +35 s")
    assert any("did not page" in b for b in all_broken(_facts("schedulers-down", [REPLICA])))


def test_redelivered_tasks_that_ran_once_on_the_other_host_are_counted() -> None:
    """(e): held by the lost worker-b, run once on worker-a: no task run twice."""
    once = TaskFact(
        "merge_revenue_r01", "success", [AttemptFact(1, "success", T0 + 40, T0 + 120, hostname="worker-a")]
    )
    text = render(_facts("redelivery", [], [once]))
    assert text.startswith("Fleet drill (e) redelivery:")
    lines = text.splitlines()
    assert any(
        line.startswith("redelivered, ran only on the other host") and line.endswith("1/1") for line in lines
    )
    assert any(line.startswith("hit tasks run more than once") and line.endswith("0") for line in lines)


def test_guards_are_counted_past_the_scenarios_start_by_the_state_a_start_was_refused_in(
    tmp_path: Path,
) -> None:
    """Only lines written after the offsets count; each refused start is counted by its try's state."""
    api = tmp_path / "api-server.log"
    worker = tmp_path / "worker-a-2.log"
    api.write_text("old Cannot start Task Instance in invalid state previous_state=running\n")
    worker.write_text("")
    fleet = SimpleNamespace(home=SimpleNamespace(logs=tmp_path))
    since = log_offsets(fleet)  # type: ignore[arg-type]
    with api.open("a") as log:
        log.write(
            "[warning] Cannot start Task Instance in invalid state [x] loc=a previous_state=running ti_id=1\n"
        )
        log.write(
            "[warning] Cannot start Task Instance in invalid state [x] loc=a previous_state=success ti_id=2\n"
        )
    worker.write_text(
        "[a] Executing workload in Celery: x\n"
        "[a] Task already running elsewhere, ignoring redelivered message\n"
    )
    assert guard_counts(fleet, since) == {  # type: ignore[arg-type]
        "api-server.log": {"api_refused_start_when_running": 1, "api_refused_start_when_success": 1},
        "worker-a-2.log": {"received": 1, "provider_ignored": 1},
    }
