"""The wedge's proof of orphanhood, its page, the canary's cause and the --heal flags (no database)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.health import JobRecord, Observation
from airflow_crashsafe.watchdog.rules import Rules, evaluate
from airflow_crashsafe.watchdog.wedge import IdleTransaction, prove_orphaned, stall_cause

NOW = datetime(2026, 12, 1, 3, 10, tzinfo=timezone.utc)
BEGAN = NOW - timedelta(minutes=5)


def scheduler(job_id: int, started: datetime, beat: datetime, state: str = "running") -> JobRecord:
    return JobRecord("scheduler", beat, state=state, job_id=job_id, hostname=f"h{job_id}", start_date=started)


def session(pid: int = 4242) -> IdleTransaction:
    return IdleTransaction(
        pid=pid,
        state="idle in transaction",
        backend_start=BEGAN - timedelta(hours=1),
        xact_start=BEGAN,
        idle_since=BEGAN,
        db_now=NOW,
        locks=("slot_pool RowShareLock",),
        database="airflow",
    )


DEAD = scheduler(1, BEGAN - timedelta(hours=2), BEGAN + timedelta(seconds=3), state="failed")
RESTARTED = scheduler(2, BEGAN + timedelta(seconds=45), NOW)


def test_proven_orphan_names_its_dead_scheduler() -> None:
    """Begun while job 1 ran, before the only live scheduler started: owned by the dead job 1."""
    judged = prove_orphaned(session(), [RESTARTED, DEAD], NOW, 30)
    assert judged.owner == DEAD
    assert judged.live == (RESTARTED,)
    assert "scheduler job 1" in judged.verdict


def test_transaction_begun_long_after_the_last_heartbeat_is_still_the_dead_schedulers() -> None:
    """A loop slowed by load: the last transaction began 40 s after the last heartbeat; still proven."""
    slow = scheduler(1, BEGAN - timedelta(hours=2), BEGAN - timedelta(seconds=40), state="failed")
    judged = prove_orphaned(session(), [RESTARTED, slow], NOW, 10)
    assert judged.owner == slow
    assert "scheduler job 1" in judged.verdict


@pytest.mark.parametrize(
    ("schedulers", "why"),
    [
        ([DEAD], "no live scheduler"),
        ([scheduler(3, BEGAN - timedelta(minutes=1), NOW), RESTARTED, DEAD], "may own it"),
        ([scheduler(3, BEGAN + timedelta(seconds=0.5), NOW), DEAD], "may own it"),  # within the clock margin
        ([RESTARTED, scheduler(1, BEGAN - timedelta(hours=2), BEGAN - timedelta(hours=1.5))], "no scheduler"),
        ([RESTARTED, scheduler(1, BEGAN - timedelta(minutes=30), BEGAN, state="failed")], "no scheduler"),
    ],
    ids=[
        "nothing-restarted",
        "ha-replica-older",
        "clock-margin",
        "no-dead-owner",
        "session-older-than-owner",
    ],
)
def test_not_proven_is_never_a_wedge(schedulers: list[JobRecord], why: str) -> None:
    """An older live replica, a start within the clock margin, or no dead owner: not proven, no page."""
    judged = prove_orphaned(session(), schedulers, NOW, 30)
    assert judged.owner is None
    assert why in judged.verdict
    observation = Observation(at=NOW, source="db", jobs=tuple(schedulers), idle_transactions=(judged,))
    _, alerts = evaluate({}, observation, Rules(expect_triggerer="no", expect_dag_processor="no"))
    assert all(not a.dedup_key.split(":")[2].startswith("scheduler_wedged") for a in alerts)


def observation_with(*sessions: IdleTransaction, last_success: datetime | None = None) -> Observation:
    return Observation(
        at=NOW,
        source="db",
        jobs=(RESTARTED, DEAD),
        canary_checked=True,
        canary_last_success=last_success or NOW - timedelta(hours=2),
        idle_transactions=sessions,
    )


def test_canary_stall_says_it_is_a_wedge_and_the_wedge_pages_despite_grace() -> None:
    """Canary stalled with a proven wedge: its summary names the wedge; the wedge pages with grace 300."""
    wedged = prove_orphaned(session(), [RESTARTED, DEAD], NOW, 30)
    rules = Rules(grace=300, canary_dag_id="canary", canary_max_age=600, expect_triggerer="no")
    incidents, alerts = evaluate({}, observation_with(wedged), rules)
    assert [a.dedup_key.split(":")[2] for a in alerts] == ["scheduler_wedged"]
    stall = incidents["scheduling_stalled"]
    assert "wedged by a dead scheduler's open transaction, backend pid 4242" in stall.summary
    assert stall.details["cause"].startswith("wedge:")


@pytest.mark.parametrize(
    ("sessions", "cause"),
    [
        (None, "unknown"),
        ((), "not a wedge"),
        ((prove_orphaned(session(), [DEAD, RESTARTED, scheduler(3, BEGAN, NOW)], NOW, 30),), "suspect"),
    ],
)
def test_stall_cause_without_a_proven_wedge(sessions: tuple[IdleTransaction, ...] | None, cause: str) -> None:
    """Not watched, nothing held, or an unproven holder: the cause says which, the summary is generic."""
    observation = Observation(at=NOW, source="db", idle_transactions=sessions)
    text, suffix = stall_cause(observation)
    assert text.startswith(cause)
    assert suffix is None


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--heal"], "--heal reads and ends metadata-DB sessions"),
        (["--heal", "--db-url", "sqlite:////tmp/airflow.db"], "needs a PostgreSQL metadata database"),
        (["--db-url", "postgresql://a@localhost/x", "--wedge-threshold", "0"], "--wedge-threshold"),
    ],
)
def test_heal_flag_mistakes_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """--heal without a PostgreSQL --db-url, or a zero wedge threshold, is a configuration error."""
    assert cli.run(parse(*argv, "--state-dir", str(tmp_path), "--once")) == 2
    assert needle in capsys.readouterr().err


def test_heal_and_wedge_threshold_from_the_config_file(tmp_path: Path) -> None:
    """[watch] heal / wedge_threshold are read from the file; flags still win."""
    path = tmp_path / "watch.toml"
    path.write_text("[watch]\nheal = true\nwedge_threshold = 90\n")
    merged, _ = cli.settings(parse("--config", str(path)))
    assert (merged["heal"], merged["wedge_threshold"]) == (True, 90.0)
    merged, _ = cli.settings(parse("--config", str(path), "--wedge-threshold", "30"))
    assert merged["wedge_threshold"] == 30.0
    assert cli.settings(parse())[0]["heal"] is False
