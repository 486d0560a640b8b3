"""The wedge scenario's options and report, on recorded facts: no Airflow, no database, no process."""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import pytest

from airflow_crashsafe.component_identity.name import application_name
from drill import wedge
from drill.cli import parse_args
from drill.facts import DrillFacts
from drill.wedge_report import WedgeFact, inconclusive, invariants, is_wedge_page, render, rows

T0 = 1_796_004_634.0


def _fact(**changes: Any) -> WedgeFact:
    """A wedge drill that went as designed: landed on try 3, wedged 120 s, healed, finished."""
    fact = WedgeFact(
        tries=3,
        kills=1,
        landed=True,
        killed_at=T0,
        restarted_at=T0 + 40,
        backend_pid=4242,
        backend_state="idle in transaction",
        backend_age=165.0,
        locks=["RowShareLock on slot_pool", "RowShareLock on task_instance"],
        advisory_lock=True,
        socket_holders=22,
        scheduler_pid=3131,
        backend_application=application_name("scheduler", 1, 3131, "drill-host"),
        tasks=20,
        stuck=20,
        stuck_seconds=118.0,
        give_up=120.0,
        wedged=True,
        heal_available=True,
        heal_started_at=T0 + 162,
        page_at=T0 + 170,
        page_key="scheduler_wedged:4242",
        page_summary="trigger critical: Restarted scheduler blocked by a dead scheduler's open transaction",
        backend_gone_at=T0 + 171,
        recovered_at=T0 + 173,
        run_state="success",
        finished_at=T0 + 330,
    )
    return dataclasses.replace(fact, **changes)


def _facts(fact: WedgeFact) -> DrillFacts:
    return DrillFacts(None, None, crashed_at=fact.killed_at, restarted_at=fact.restarted_at, wedge=fact)


def test_default_scenario_keeps_sqlite_and_wedge_picks_postgres() -> None:
    """--scenario defaults to the crash on SQLite; wedge runs on the PostgreSQL metadata DB."""
    assert (parse_args([]).scenario, parse_args([]).metadata) == ("default", "sqlite")
    args = parse_args(["--scenario", "wedge"])
    assert (args.scenario, args.metadata, args.give_up, args.wedge_tasks) == ("wedge", "postgres", 120.0, 20)
    assert parse_args(["--scenario", "wedge", "--give-up", "30"]).give_up == 30.0


def test_wedge_refuses_sqlite(capsys: pytest.CaptureFixture[str]) -> None:
    """--scenario wedge --metadata sqlite is refused with a message naming the fix."""
    with pytest.raises(SystemExit):
        parse_args(["--scenario", "wedge", "--metadata", "sqlite"])
    assert "--scenario wedge needs --metadata postgres" in capsys.readouterr().err


def test_healed_wedge_holds_and_reports_both_phases() -> None:
    """Plain stays wedged, crashsafe pages and recovers: no broken invariant, every timing shown."""
    facts = _facts(_fact())
    assert invariants(facts) == []
    assert inconclusive(facts) == []
    plain, crashsafe = rows(facts, "plain"), rows(facts, "crashsafe")
    assert plain["restarted scheduler queued the reset tasks"].startswith("no: 20/20 stuck scheduled 118 s")
    assert "backend 4242 idle in transaction 165 s" in plain["dead scheduler's open transaction"]
    assert crashsafe["page naming the cause"] == "restart +130 s (watchdog +8 s)"
    assert crashsafe["restarted scheduler queued the reset tasks"] == "yes, restart +133 s (watchdog +11 s)"
    assert crashsafe["run finished"] == "success, restart +290 s"
    text = render(facts)
    assert "on try 3" in text
    assert "RowShareLock on slot_pool" in text
    assert "Crashsafe invariants hold" in text


@pytest.mark.parametrize(
    ("changes", "broken"),
    [
        ({"page_at": None}, "never paged"),
        ({"recovered_at": None, "run_state": None}, "never queued the 20 reset tasks"),
        ({"run_state": "running"}, "did not finish"),
        ({"backend_application": ""}, "carried no identity of scheduler pid 3131"),
        ({"backend_application": application_name("scheduler", 1, 999, "drill-host")}, "no identity"),
        ({"backend_application": application_name("triggerer", 1, 3131, "drill-host")}, "no identity"),
    ],
)
def test_crashsafe_phase_failures_break_invariants(changes: dict[str, Any], broken: str) -> None:
    """No page, no recovery, an unfinished run, a session without the killed scheduler's identity: broken."""
    found = invariants(_facts(_fact(**changes)))
    assert any(broken in line for line in found)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"landed": False}, "never left the scheduler's session open"),
        ({"wedged": False}, "was not wedged"),
        ({"heal_available": False, "heal_started_at": None}, "has no --heal"),
    ],
)
def test_what_proves_nothing_is_inconclusive(changes: dict[str, Any], reason: str) -> None:
    """A kill outside the critical section, no wedge or no --heal proves nothing (exit 3), breaks nothing."""
    facts = _facts(_fact(**changes))
    assert invariants(facts) == []
    assert any(reason in line for line in inconclusive(facts))
    assert reason in render(facts)


def test_wedge_fact_round_trips_through_json() -> None:
    """--facts-json keeps the wedge's record, so the report renders from it later."""
    facts = _facts(_fact())
    assert DrillFacts.from_json(facts.to_json()).wedge == facts.wedge


def test_page_matched_loosely_by_its_text() -> None:
    """The page is recognised by "open transaction" in its summary or a wedge key, not by exact wording."""
    assert is_wedge_page("scheduler_wedged:4242", "")
    assert is_wedge_page("x", "Restarted scheduler blocked by a dead scheduler's OPEN TRANSACTION")
    assert not is_wedge_page("scheduler_dead", "scheduler dead: heartbeat 45 s old")


def test_dag_file_matches_the_scenario_names() -> None:
    """The copied DAG file defines the dag_id and task prefix the scenario watches."""
    constants = {
        target.id: node.value.value
        for node in ast.parse(wedge.DAG_SOURCE.read_text()).body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert (constants["DAG_ID"], constants["TASK_PREFIX"]) == (wedge.DAG_ID, wedge.TASK_PREFIX)
