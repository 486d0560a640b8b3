"""Deadlines through the watchdog's poll and the incident engine: missed, early, resolve, skip, once."""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.alerting import Dispatcher
from airflow_crashsafe.testing.alerts import RecordingSink
from airflow_crashsafe.watchdog.claims import ClaimDir
from airflow_crashsafe.watchdog.deadline_watch import DeadlineWatch
from airflow_crashsafe.watchdog.deadlines import parse_deadlines
from airflow_crashsafe.watchdog.forecast import TaskProgress
from airflow_crashsafe.watchdog.health import JobRecord, Observation
from airflow_crashsafe.watchdog.loop import Watchdog
from airflow_crashsafe.watchdog.rules import Rules
from airflow_crashsafe.watchdog.runs import AirflowDeadline, RunReader, RunView
from airflow_crashsafe.watchdog.state import StateFile, WatchStarts

UTC = timezone.utc
#: 06:00 Berlin on 15 January 2026 is 05:00 UTC; the run became due at 00:00 Berlin (23:00 UTC).
DEADLINE = datetime(2026, 1, 15, 5, 0, tzinfo=UTC)
DUE = datetime(2026, 1, 14, 23, 0, tzinfo=UTC)
GRAPH = {"extract": ("load",), "load": ()}
HISTORY = {"extract": (1800.0,), "load": (1800.0,)}  # 1 h in all
#: The previous day's run, done in time: its deadline (06:00 on the 14th) is still watched.
YESTERDAY = RunView("yesterday", "scheduled", "success", DUE - timedelta(days=1))
SPEC = {"dag_id": "nightly", "at": "06:00", "timezone": "Europe/Berlin", "severity": "critical"}


@dataclass
class World:
    """What Airflow looks like: the clock, a dead or live scheduler, and the nightly run."""

    now: datetime = DEADLINE - timedelta(hours=3)
    scheduler_beat: datetime | None = None
    run: RunView | None = None
    blind: bool = False
    #: ``deadline`` rows of Airflow's own DeadlineAlerts; None: reading them fails.
    airflow: list[AirflowDeadline] | None = None

    def clock(self) -> datetime:
        return self.now


class Fetcher:
    """The World's nightly run, dependencies and durations, as a source's RunFetcher reads them."""

    def __init__(self, world: World) -> None:
        self.world = world

    def runs(self, dag_id: str, since: datetime) -> list[RunView]:
        runs = [YESTERDAY] + ([self.world.run] if self.world.run else [])
        return [run for run in runs if run.run_after >= since]

    def task_instances(
        self,
        dag_id: str,
        run_ids: Sequence[str],
        updated_since: datetime | None = None,
        waiting: Collection[str] = (),
    ) -> dict[str, list[TaskProgress]]:
        run = self.world.run
        return {r: list(run.tasks) if run and run.run_id == r else [] for r in run_ids}

    def downstream(self, dag_id: str) -> dict[str, tuple[str, ...]]:
        return dict(GRAPH)

    def durations(
        self, dag_id: str, per_task: int, ended_since: datetime | None = None
    ) -> dict[str, tuple[float, ...]]:
        return {} if ended_since else dict(HISTORY)

    def airflow_deadlines(self, since: datetime) -> list[AirflowDeadline]:
        if self.world.airflow is None:
            raise ValueError("GET /ui/dags/~/dagRuns/~/deadlines answered HTTP 500")
        return [row for row in self.world.airflow if row.at >= since]


class FakeSource:
    """A source seeing the World, its deadline runs read through a real RunReader."""

    source = "db"
    target = "fake"

    def __init__(self, world: World, runs: RunReader) -> None:
        self.world, self.runs = world, runs

    def observe(self, now: datetime) -> Observation:
        if self.world.blind:
            return Observation(at=now, source="db", error="cannot read")
        beat = self.world.scheduler_beat or now
        assert self.runs is not None
        return Observation(
            at=now,
            source="db",
            jobs=(JobRecord("scheduler", beat, state="running", job_id=1, hostname="s"),),
            exists={"scheduler": True},
            deadline_dags=self.runs.read(Fetcher(self.world), now),
        )


def watchdog(
    world: World,
    tmp_path: Path,
    sink: RecordingSink,
    claims: ClaimDir | None = None,
    name: str = "a",
    spec: dict[str, str] = SPEC,
) -> Watchdog:
    """A watchdog of instance "prod" with the nightly deadline, a capturing sink and its own state."""
    starts = WatchStarts(tmp_path / f"deadlines-{name}.json")
    deadlines = DeadlineWatch(
        parse_deadlines([spec]), "prod", repeat_interval=0, claims=claims, starts=starts
    )
    source = FakeSource(world, RunReader(deadlines.wanted))
    rules = Rules(repeat_interval=0, instance="prod")
    state = StateFile(tmp_path / f"state-{name}.json")
    return Watchdog(source, rules, Dispatcher([sink]), state, clock=world.clock, deadlines=deadlines)


def deadline_events(sink: RecordingSink) -> list[tuple[str, str]]:
    return [(a.event, a.dedup_key.split(":")[2]) for a in sink.alerts if ":deadline_" in a.dedup_key]


def running(start: datetime, *tasks: TaskProgress, state: str = "running") -> RunView:
    return RunView(
        "scheduled__2026-01-14T23:00:00+00:00", "scheduled", state, DUE, start_date=start, tasks=tasks
    )


Setup = tuple[World, RecordingSink, Watchdog]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    world, sink = World(), RecordingSink("capture")
    return world, sink, watchdog(world, tmp_path, sink)


def at(world: World, when: datetime, dog: Watchdog) -> None:
    world.now = when
    dog.tick()


def watching(world: World, *dogs: Watchdog) -> None:
    """Each watchdog polls an hour before the deadline: it was watching when the deadline passed."""
    for dog in dogs:
        at(world, DEADLINE - timedelta(hours=1), dog)


def test_dead_scheduler_past_the_deadline_pages_missed(setup: Setup) -> None:
    """A run stuck running behind a dead scheduler pages 'missed' at the first poll past 06:00."""
    world, sink, dog = setup
    world.run = running(DUE, TaskProgress("extract", "success"), TaskProgress("load", "running", DUE))
    world.scheduler_beat = DEADLINE - timedelta(hours=2)
    at(world, DEADLINE - timedelta(seconds=10), dog)
    assert deadline_events(sink) == []  # load ran long ago, forecast says now: no early page
    at(world, DEADLINE + timedelta(seconds=10), dog)
    assert deadline_events(sink) == [("trigger", "deadline_missed")]
    missed = next(a for a in sink.alerts if "deadline_missed" in a.dedup_key)
    assert missed.severity == "critical"
    assert "missed its deadline nightly@06:00 (2026-01-15 06:00 CET)" in missed.summary
    assert missed.details["run_state"] == "running"
    assert missed.details["deadline_at"] == "2026-01-15T06:00:00+01:00"
    assert any(a.dedup_key.split(":")[2] == "scheduler_dead" for a in sink.alerts)


def test_no_run_at_all_is_missed(setup: Setup) -> None:
    """A run the dead scheduler never created is missed too, and says so."""
    world, sink, dog = setup
    watching(world, dog)
    at(world, DEADLINE + timedelta(minutes=1), dog)
    [alert] = [a for a in sink.alerts if ":deadline_" in a.dedup_key]
    assert alert.details["run_state"] == "missing"
    assert "no run became due" in alert.summary


def test_slow_run_pages_early_with_forecast_and_critical_path(setup: Setup) -> None:
    """Forecast later than the deadline pages before it, naming the forecast and the tasks driving it."""
    world, sink, dog = setup
    start = DEADLINE - timedelta(minutes=40)
    world.run = running(start, TaskProgress("extract", "running", start))
    at(world, start + timedelta(minutes=10), dog)  # 20 min of extract + 30 of load left: 05:40 > 05:00
    assert deadline_events(sink) == [("trigger", "deadline_at_risk")]
    [early] = sink.alerts
    assert early.at < DEADLINE
    assert early.details["forecast_finish"] == (DEADLINE + timedelta(minutes=20)).isoformat()
    assert [t["task_id"] for t in early.details["critical_path"]] == ["extract", "load"]
    assert "forecast finish 06:20 CET (+20 min)" in early.summary
    at(world, DEADLINE + timedelta(minutes=1), dog)  # then missed: a second, different page
    assert deadline_events(sink) == [("trigger", "deadline_at_risk"), ("trigger", "deadline_missed")]
    world.run = running(start, state="success")
    at(world, DEADLINE + timedelta(minutes=25), dog)
    assert sorted(deadline_events(sink)[2:]) == [
        ("resolve", "deadline_at_risk"),
        ("resolve", "deadline_missed"),
    ]
    assert dog.incidents == {}


def test_on_time_run_and_early_success_never_page(setup: Setup) -> None:
    """A run forecast in time is silent; one that succeeded before its deadline is skipped."""
    world, sink, dog = setup
    start = DEADLINE - timedelta(hours=2)
    world.run = running(start, TaskProgress("extract", "running", start))
    at(world, start + timedelta(minutes=5), dog)
    world.run = running(start, state="success")
    for minutes in (60, 130, 300):
        at(world, start + timedelta(minutes=minutes), dog)
    assert deadline_events(sink) == []


def test_failed_run_is_at_risk_then_missed(setup: Setup) -> None:
    """A failed run before the deadline pages early (it will miss unless cleared), then missed."""
    world, sink, dog = setup
    world.run = running(DUE, state="failed")
    at(world, DEADLINE - timedelta(hours=1), dog)
    at(world, DEADLINE + timedelta(seconds=1), dog)
    assert deadline_events(sink) == [("trigger", "deadline_at_risk"), ("trigger", "deadline_missed")]
    assert "run scheduled__2026-01-14T23:00:00+00:00 failed" in sink.alerts[0].summary


def test_blind_poll_neither_opens_nor_resolves(setup: Setup) -> None:
    """While the source cannot be read, a deadline incident is kept as it is (no resolve)."""
    world, sink, dog = setup
    watching(world, dog)
    at(world, DEADLINE + timedelta(minutes=1), dog)
    world.blind = True
    at(world, DEADLINE + timedelta(minutes=2), dog)
    assert [k for k in dog.incidents if k.startswith("deadline_missed")]
    assert ("resolve", "deadline_missed") not in deadline_events(sink)


def test_two_replicas_send_one_dedup_key(tmp_path: Path) -> None:
    """Two replicas polling at different moments raise the same dedup key (a PagerDuty sink merges them)."""
    world, sinks = World(), [RecordingSink("capture"), RecordingSink("capture")]
    dogs = [watchdog(world, tmp_path, sink, name=name) for sink, name in zip(sinks, "ab", strict=True)]
    watching(world, *dogs)
    for offset, dog in zip((7, 31), dogs, strict=True):
        at(world, DEADLINE + timedelta(seconds=offset), dog)
    keys = [[a.dedup_key for a in sink.alerts if ":deadline_" in a.dedup_key] for sink in sinks]
    assert keys[0] == keys[1]
    assert len(keys[0]) == 1


def test_shared_claim_dir_sends_each_event_once(tmp_path: Path) -> None:
    """With a shared claim dir, two replicas deliver one trigger and one resolve between them."""
    world, sinks = World(), [RecordingSink("capture"), RecordingSink("capture")]
    claims = tmp_path / "claims"
    dogs = [watchdog(world, tmp_path, s, ClaimDir(claims), name) for s, name in zip(sinks, "ab", strict=True)]
    watching(world, *dogs)
    for seconds in (5, 10):
        for dog in dogs:
            at(world, DEADLINE + timedelta(seconds=seconds), dog)
    world.run = running(DUE, state="success")
    for dog in reversed(dogs):
        at(world, DEADLINE + timedelta(seconds=30), dog)
    both = [e for s in sinks for e in deadline_events(s)]
    assert sorted(both) == [("resolve", "deadline_missed"), ("trigger", "deadline_missed")]
    assert deadline_events(sinks[0]) == [("trigger", "deadline_missed")]
    assert deadline_events(sinks[1]) == [("resolve", "deadline_missed")]


def test_restart_keeps_the_dedup_key(tmp_path: Path) -> None:
    """A restarted watchdog resolves under the same dedup key it triggered with (state file)."""
    world, sink = World(), RecordingSink("capture")
    first = watchdog(world, tmp_path, sink)
    watching(world, first)
    at(world, DEADLINE + timedelta(seconds=5), first)
    world.run = running(DUE, state="success")
    at(world, DEADLINE + timedelta(minutes=5), watchdog(world, tmp_path, sink))
    trigger, resolve = [a for a in sink.alerts if ":deadline_" in a.dedup_key]
    assert (trigger.event, resolve.event) == ("trigger", "resolve")
    assert trigger.dedup_key == resolve.dedup_key


def test_fresh_rule_is_silent_about_deadlines_passed_before_it_was_watched(tmp_path: Path) -> None:
    """Configured at 10:00, the rule pages nothing for 06:00 that morning, then tomorrow's 06:00 pages."""
    world, sink = World(), RecordingSink("capture")
    world.run = running(DUE, TaskProgress("extract", "running", DUE))  # never finished
    world.scheduler_beat = DEADLINE - timedelta(hours=2)  # and the scheduler is dead
    dog = watchdog(world, tmp_path, sink)
    for hours in (4, 5, 12):
        at(world, DEADLINE + timedelta(hours=hours), dog)
    assert deadline_events(sink) == []
    at(world, DEADLINE + timedelta(days=1, seconds=10), dog)  # no run became due for the 16th
    assert deadline_events(sink) == [("trigger", "deadline_missed")]
    assert sink.alerts[-1].details["deadline_utc"] == (DEADLINE + timedelta(days=1)).isoformat()
    assert sink.alerts[-1].details["run_state"] == "missing"


def test_restarted_watchdog_pages_a_deadline_passed_while_it_was_down(tmp_path: Path) -> None:
    """Watching since before 06:00, stopped, started again at 07:00: it remembers and pages."""
    world, sink = World(), RecordingSink("capture")
    world.run = running(DUE, TaskProgress("extract", "success"), TaskProgress("load", "running", DUE))
    watching(world, watchdog(world, tmp_path, sink))
    at(world, DEADLINE + timedelta(hours=1), watchdog(world, tmp_path, sink))
    assert deadline_events(sink) == [("trigger", "deadline_missed")]
    assert list(WatchStarts(tmp_path / "deadlines-a.json").load().values()) == [DEADLINE - timedelta(hours=1)]


def test_changed_rule_is_watched_anew_but_a_new_severity_is_not(tmp_path: Path) -> None:
    """A rule whose time changes starts watching again; one whose severity changes keeps its start."""
    world, sink = World(), RecordingSink("capture")
    watching(world, watchdog(world, tmp_path, sink))
    moved = {**SPEC, "at": "05:30", "name": "nightly"}  # 04:30 UTC passed before the change
    at(world, DEADLINE + timedelta(minutes=10), watchdog(world, tmp_path, sink, spec=moved))
    assert deadline_events(sink) == []
    louder = {**moved, "severity": "warning"}
    at(world, DEADLINE + timedelta(days=1), watchdog(world, tmp_path, sink, spec=louder))
    assert deadline_events(sink) == [("trigger", "deadline_missed")]
    assert sink.alerts[-1].severity == "warning"
    [since] = WatchStarts(tmp_path / "deadlines-a.json").load().values()
    assert since == DEADLINE + timedelta(minutes=10)


def test_open_incident_from_before_the_start_is_still_judged(tmp_path: Path) -> None:
    """With its start forgotten (no deadlines.json), an open page is neither dropped nor resolved early."""
    world, sink = World(), RecordingSink("capture")
    first = watchdog(world, tmp_path, sink)
    watching(world, first)
    at(world, DEADLINE + timedelta(minutes=1), first)
    (tmp_path / "deadlines-a.json").unlink()
    again = watchdog(world, tmp_path, sink)
    at(world, DEADLINE + timedelta(minutes=2), again)
    assert [k.split(":")[0] for k in again.incidents] == ["deadline_missed"]
    world.run = running(DUE, state="success")
    at(world, DEADLINE + timedelta(minutes=3), again)
    assert deadline_events(sink) == [("trigger", "deadline_missed"), ("resolve", "deadline_missed")]


def test_unreadable_starts_are_set_aside(tmp_path: Path) -> None:
    """A deadlines.json that is not the expected JSON is moved aside; watching starts anew."""
    path = tmp_path / "deadlines.json"
    for bad in (b"\xff", b"[]", b'{"version": 1, "rules": {"x": {"since": "2026-01-15T05:00:00"}}}'):
        path.write_bytes(bad)
        assert WatchStarts(path).load() == {}
        assert not path.exists()
    WatchStarts(path).save({"x": DEADLINE})
    assert WatchStarts(path).load() == {"x": DEADLINE}


def test_occurrence_past_keep_is_forgotten_without_resolve(setup: Setup) -> None:
    """A missed deadline older than ``keep`` (1 day) is dropped, not reported as recovered."""
    world, sink, dog = setup
    watching(world, dog)
    at(world, DEADLINE + timedelta(seconds=5), dog)
    at(world, DEADLINE + timedelta(days=1, minutes=1), dog)
    assert ("resolve", "deadline_missed") not in deadline_events(sink)
    assert not any(k.endswith(DEADLINE.isoformat()) for k in dog.incidents)


def test_cli_reads_deadlines_from_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``[[deadlines]]`` in the config file arms the watch; a bad entry exits 2 naming the field."""
    from airflow_crashsafe.watchdog import cli

    good = tmp_path / "good.json"
    good.write_text(json.dumps({"watch": {"deadline_claim_dir": str(tmp_path / "c")}, "deadlines": [SPEC]}))
    monkeypatch.setenv("T", "token")
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--config", str(good), "--api-token-env", "T", "--state-dir", str(tmp_path)])
    dog, _ = cli._build(args)
    assert dog.deadlines is not None
    assert dog.deadlines.claims is not None
    assert dog.source.runs is not None
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"deadlines": [{**SPEC, "timezone": "Berlin/Mitte"}]}))
    assert cli.main(["--config", str(bad), "--once", "--state-dir", str(tmp_path)]) == 2


def test_airflow_deadline_alerts_page_without_the_scheduler(tmp_path: Path) -> None:
    """Airflow's deadline rows page missed, resolve on success; one passed before watching is silent."""
    world, sink = World(airflow=[]), RecordingSink("capture")
    watch = DeadlineWatch((), "prod", repeat_interval=0, airflow_severity="critical")
    reader = RunReader(watch.wanted, airflow_deadlines=True)
    rules = Rules(repeat_interval=0, instance="prod")
    dog = Watchdog(
        FakeSource(world, reader),
        rules,
        Dispatcher([sink]),
        StateFile(tmp_path / "s.json"),
        clock=world.clock,
        deadlines=watch,
    )
    world.run = running(DUE, TaskProgress("extract", "running", DUE))
    assert world.airflow is not None
    early = DEADLINE - timedelta(hours=2)  # passed before the first poll: never paged
    world.airflow.append(AirflowDeadline("nightly", world.run.run_id, early, "sla_4am", DUE))
    world.airflow.append(AirflowDeadline("nightly", world.run.run_id, DEADLINE, "sla_6am", DUE))
    at(world, DEADLINE - timedelta(hours=1), dog)  # extract's 30 min are long over: load's 30 min fit
    assert deadline_events(sink) == []
    at(world, DEADLINE + timedelta(seconds=5), dog)
    assert deadline_events(sink) == [("trigger", "deadline_missed")]
    assert "missed its deadline airflow:sla_6am" in sink.alerts[-1].summary
    rows, world.airflow = world.airflow, None  # unreadable: neither resolved nor dropped
    world.run = running(DUE, state="success")
    at(world, DEADLINE + timedelta(minutes=1), dog)
    assert deadline_events(sink) == [("trigger", "deadline_missed")]
    world.airflow = rows
    at(world, DEADLINE + timedelta(minutes=2), dog)
    assert deadline_events(sink)[-1] == ("resolve", "deadline_missed")


def test_watch_once_with_deadlines_runs_with_airflow_blocked(tmp_path: Path) -> None:
    """A `watch --once` poll with cron and time-of-day deadlines imports no Airflow module."""
    import subprocess
    import sys
    import textwrap

    from tests.unit.watchdog.test_imports import BLOCKER, ROOT

    config = tmp_path / "watch.json"
    cron = {"dag_id": "hourly", "cron": "0 * * * *", "offset": "45m"}
    config.write_text(json.dumps({"deadlines": [SPEC, cron], "watch": {"watch_airflow_deadlines": True}}))
    (tmp_path / "empty.db").write_bytes(b"")
    code = BLOCKER + textwrap.dedent(
        f"""
        from airflow_crashsafe.watchdog import cli
        rc = cli.main(["--db-url", "sqlite:///{tmp_path}/empty.db", "--config", {str(config)!r},
                       "--once", "--state-dir", {str(tmp_path)!r}])
        assert not [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
        assert "croniter" in sys.modules
        sys.exit(rc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    assert "db_unreachable" in result.stderr
