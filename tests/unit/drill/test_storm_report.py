"""The storm report, from recorded facts: the chain side by side, the scaled clock, the verdict."""

from __future__ import annotations

import json
from dataclasses import asdict

from drill.storm_report import StormDag, StormFacts, inconclusive, invariants, render

NIGHT = 1_000_000.0
DEADLINE = NIGHT + 120.0


def _facts(
    *, crashsafe_lost_end: float = NIGHT + 100.0, plain_adopt_end: float | None = NIGHT + 150.0
) -> StormFacts:
    facts = StormFacts(
        loads=8,
        capacity=2,
        budget=2,
        steps=12,
        step_seconds=1.0,
        interval=8.0,
        statement_timeout=14.0,
        retries_allowed=3,
        retry_delay=5.0,
        night_start=NIGHT,
        deadline_at=DEADLINE,
        crashed_at=NIGHT + 8,
        restarted_at=NIGHT + 28,
    )
    facts.dags = [
        StormDag(
            "storm_plain_adopt",
            "plain",
            "adopt",
            "success" if plain_adopt_end else "running",
            plain_adopt_end,
            peak=5,
            above_seconds=31.0,
            timeouts=6,
            retries=5,
            loads_rerun=4,
            executions=14,
            needed=96,
            redone=40,
            early_page_at=DEADLINE - 20,
            missed_page_at=DEADLINE + 1,
        ),
        StormDag(
            "storm_crashsafe_adopt",
            "crashsafe",
            "adopt",
            "success",
            NIGHT + 75,
            peak=2,
            loads_rerun=4,
            executions=8,
            needed=96,
        ),
        StormDag(
            "storm_plain_lost",
            "plain",
            "lost",
            "failed",
            NIGHT + 110,
            peak=8,
            above_seconds=60,
            timeouts=20,
            retries=18,
            loads_rerun=8,
            early_page_at=NIGHT + 111,
            missed_page_at=DEADLINE + 2,
        ),
        StormDag(
            "storm_crashsafe_lost",
            "crashsafe",
            "lost",
            "success",
            crashsafe_lost_end,
            peak=2,
            loads_rerun=8,
        ),
    ]
    facts.lost = {"lost": {"processes": 16, "backends": 4}}
    return facts


def test_the_report_shows_the_chain_side_by_side_per_variant() -> None:
    """Each variant gets a table: peak against C, timeouts, retries, work redone, finish, pages."""
    text = render(_facts())
    assert "Variant adopt" in text
    assert "Variant lost" in text
    assert "killed 16 worker processes and terminated 4 warehouse backends" in text
    line = next(row for row in text.splitlines() if "peak concurrent loads (C = 2)" in row)
    assert "5 (above C for 31 s)" in line
    assert "2" in line.split("5 (above C for 31 s)")[1]
    assert "96 s / 40 s" in text
    assert "MISSED" in text
    assert "VERDICT: plain operators missed the deadline; crashsafe met it in every variant" in text


def test_times_are_read_on_the_scaled_clock() -> None:
    """00:00 is the first source and 06:00 the deadline: 150 s on a 120 s night is 07:30, 90 min after it."""
    facts = _facts()
    assert facts.clock(NIGHT) == "00:00"
    assert facts.clock(DEADLINE) == "06:00"
    text = render(facts)
    assert "07:30 success, 90 min after it (+30 s)" in text
    assert "at 05:00, 60 min before (20 s)" in text  # the early page, 20 s = 60 scaled minutes ahead
    assert "fired at 06:03 (+1 s)" in text


def test_a_crashsafe_side_past_the_deadline_breaks_the_promise() -> None:
    """A crashsafe DAG that finishes after the deadline is a broken invariant naming it."""
    facts = _facts(crashsafe_lost_end=DEADLINE + 5)
    assert [b.split(":")[0] for b in invariants(facts)] == ["storm_crashsafe_lost"]
    assert "VERDICT: crashsafe missed its deadline" in render(facts)


def test_a_plain_side_that_meets_the_deadline_proves_nothing() -> None:
    """If plain operators met the deadline the storm was not reproduced: inconclusive."""
    facts = _facts(plain_adopt_end=NIGHT + 90)
    assert invariants(facts) == []
    assert inconclusive(facts) == ["storm_plain_adopt met the deadline: the storm was not reproduced"]
    assert "VERDICT: inconclusive" in render(facts)


def test_a_run_still_running_is_not_finished_and_missed() -> None:
    """A run that had not ended when the drill stopped waiting is reported as such, not as a time."""
    text = render(_facts(plain_adopt_end=None))
    assert "not finished (running)" in text


def test_facts_round_trip_through_json() -> None:
    """--facts-json writes what from_json reads back into the same report."""
    facts = _facts()
    again = StormFacts.from_json(json.loads(json.dumps(asdict(facts))))
    assert render(again) == render(facts)
