"""Fault injection on the watchdog: sinks that stall, corrupt state, shared defaults, refused credentials.

Every case runs the real loop or the real `watch` command against real local servers. Timing
assertions are bounds with wide margins (a slow shared machine must not fail them), not targets.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.alerting import Dispatcher, FileOutbox, build_sinks
from airflow_crashsafe.watchdog import cli
from airflow_crashsafe.watchdog.api import ApiSource
from airflow_crashsafe.watchdog.loop import Watchdog
from airflow_crashsafe.watchdog.rules import Rules
from airflow_crashsafe.watchdog.state import StateFile, default_state_dir
from tests.support.faulty import FaultyServer, drip, faulty, silent
from tests.support.httpserver import Recorded, Reply, Server, serve

OK_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


def health(scheduler_alive: bool = True) -> dict[str, Any]:
    """Airflow's health body: scheduler fresh, or unhealthy with no heartbeat."""
    now = datetime.now(timezone.utc).isoformat()
    scheduler = (
        {"status": "healthy", "latest_scheduler_heartbeat": now}
        if scheduler_alive
        else {"status": "unhealthy", "latest_scheduler_heartbeat": None}
    )
    return {
        "metadatabase": {"status": "healthy"},
        "scheduler": scheduler,
        "triggerer": {"status": None, "latest_triggerer_heartbeat": None},
        "dag_processor": {"status": None, "latest_dag_processor_heartbeat": None},
    }


@contextmanager
def stalling(kind: str) -> Iterator[Server | FaultyServer]:
    """A sink that drips (1 byte / 2 s), never answers, or answers 500."""
    if kind == "drip":
        with faulty(drip(OK_RESPONSE, every=2.0)) as dripping:
            yield dripping
    elif kind == "silent":
        with faulty(silent) as quiet:
            yield quiet
    else:
        with serve(lambda _r: Reply(500, "down")) as failing:
            yield failing


@pytest.mark.parametrize("kind", ["drip", "silent", "500"])
def test_poll_keeps_its_pace_and_healthy_sink_is_paged_while_a_sink_stalls(kind: str, tmp_path: Path) -> None:
    """A stalling sink beside a healthy one: polls keep their interval, the healthy sink is paged
    within its poll, SIGTERM (stop) returns promptly and the stalled alert stays in the outbox."""
    with (
        serve(lambda _r: Reply(200, health(scheduler_alive=False))) as airflow,
        serve() as good,
        stalling(kind) as bad,
    ):
        sinks = build_sinks(
            [
                # Long timeouts and deadline: what bounds the loop is that it never waits on them.
                {"type": "webhook", "name": "bad", "url": bad.url + "/h", "timeout": 60, "deadline": 60},
                {"type": "webhook", "name": "good", "url": good.url + "/h"},
            ]
        )
        outbox = FileOutbox(tmp_path / "outbox.jsonl")
        dog = Watchdog(
            ApiSource(airflow.url, timeout=2),
            Rules(grace=0, instance="t"),
            Dispatcher(sinks, outbox=outbox),
            StateFile(tmp_path / "state.json"),
        )
        stop = threading.Event()
        loop = threading.Thread(target=dog.run, args=(stop, 0.2), kwargs={"stop_timeout": 1.0})
        started = time.monotonic()
        loop.start()
        while not good.requests and time.monotonic() - started < 10:
            time.sleep(0.02)
        paged_after = time.monotonic() - started
        time.sleep(max(0.0, 4.0 - paged_after))
        polls = len(airflow.requests)
        stop.set()
        stopping = time.monotonic()
        loop.join(10)
        stopped_in = time.monotonic() - stopping
    assert paged_after < 2.0, f"healthy sink paged only after {paged_after:.1f} s"
    assert polls >= 8, f"only {polls} polls in 4 s at a 0.2 s interval"  # ~20 expected
    assert not loop.is_alive()
    assert stopped_in < 4.0, f"stop took {stopped_in:.1f} s"
    with outbox.locked():
        left = outbox.load()
    assert [(e["sink"], e["alert"]["event"]) for e in left] == [("bad", "trigger")]


def _once(*argv: str) -> int:
    return cli.run(parse(*argv, "--once"))


def test_sigterm_stops_promptly_while_a_sink_never_answers(tmp_path: Path) -> None:
    """`watch` with a silent sink: SIGTERM returns within a few seconds; the alert waits in the outbox."""
    with serve(lambda _r: Reply(200, health(scheduler_alive=False))) as airflow, faulty(silent) as sink:
        config = tmp_path / "watch.json"
        sink_spec = {"type": "webhook", "url": sink.url + "/h", "timeout": 60, "deadline": 60}
        config.write_text(json.dumps({"watch": {"api_url": airflow.url}, "sinks": [sink_spec]}))
        args = parse("--config", str(config), "--state-dir", str(tmp_path), "--interval", "0.2")
        previous = signal.signal(signal.SIGTERM, lambda *_: None)
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
        started = time.monotonic()
        timer.start()
        try:
            code = cli.run(args)
        finally:
            timer.cancel()
            timer.join()
            signal.signal(signal.SIGTERM, previous)
        took = time.monotonic() - started
    assert code == 0
    assert took < 6.0, f"SIGTERM took {took - 1:.1f} s to stop the watchdog"
    entries = [json.loads(line) for line in (tmp_path / "outbox.jsonl").read_text().splitlines()]
    assert [e["alert"]["event"] for e in entries] == ["trigger"]


def test_once_is_bounded_by_one_deadline_whatever_the_retries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`watch --once`, silent sink (deadline 2 s, 2 retries): returns at --once-deadline 3 s, not ~9 s."""
    with (
        serve(lambda _r: Reply(200, health(scheduler_alive=False))) as airflow,
        faulty(silent) as quiet,
        serve() as healthy,
    ):
        config = tmp_path / "watch.json"
        sinks = [
            {"type": "webhook", "name": "quiet", "url": quiet.url + "/h", "deadline": 2, "retries": 2},
            {"type": "webhook", "name": "healthy", "url": healthy.url + "/h"},
        ]
        config.write_text(json.dumps({"watch": {"api_url": airflow.url}, "sinks": sinks}))
        started = time.monotonic()
        code = _once("--config", str(config), "--state-dir", str(tmp_path), "--once-deadline", "3")
        took = time.monotonic() - started
        assert [r.json()["event"] for r in healthy.requests] == ["trigger"]  # paged beside the silent one
    assert code == 1
    assert 2.5 < took < 6.0, f"--once took {took:.1f} s"
    assert "delivery to quiet not finished within --once-deadline 3 s" in capsys.readouterr().err
    entries = [json.loads(line) for line in (tmp_path / "outbox.jsonl").read_text().splitlines()]
    assert [(e["sink"], e["alert"]["event"]) for e in entries] == [("quiet", "trigger")]


def test_non_utf8_state_is_moved_aside_and_watch_starts_fresh(tmp_path: Path) -> None:
    """A state.json that is not UTF-8 no longer crashes start-up: moved aside, watching goes on."""
    (tmp_path / "state.json").write_bytes(b'\xff\xfe{"version": 1, \x00\x9c')
    with serve(lambda _r: Reply(200, health())) as airflow:
        assert _once("--api-url", airflow.url, "--state-dir", str(tmp_path)) == 0
    aside = [p.name for p in tmp_path.iterdir() if p.name.startswith("state.json.corrupt-")]
    assert len(aside) == 1
    assert StateFile(tmp_path / "state.json").load() == {}


def test_two_watchdogs_without_state_dir_keep_separate_incidents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default state dirs are per instance: a healthy Airflow's watchdog never resolves another's page."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CRASHSAFE_WATCH_STATE_DIR", raising=False)
    with serve(lambda _r: Reply(200, health(False))) as sick, serve(lambda _r: Reply(200, health())) as well:
        assert _once("--api-url", sick.url) == 1
        assert _once("--api-url", well.url) == 0
        assert _once("--api-url", sick.url) == 1  # still open: nobody resolved it
        sick_dir = default_state_dir("127.0.0.1", ApiSource(sick.url).target)
        well_dir = default_state_dir("127.0.0.1", ApiSource(well.url).target)
    assert sick_dir != well_dir
    assert sick_dir.parent == tmp_path / ".local" / "state" / "airflow-crashsafe"
    assert list(StateFile(sick_dir / "state.json").load()) == ["scheduler_dead"]
    assert StateFile(well_dir / "state.json").load() == {}
    assert default_state_dir("a", "x") != default_state_dir("b", "x")
    monkeypatch.setenv("CRASHSAFE_WATCH_STATE_DIR", str(tmp_path / "chosen"))
    with serve(lambda _r: Reply(200, health(False))) as other:
        assert _once("--api-url", other.url) == 1
    assert list(StateFile(tmp_path / "chosen" / "state.json").load()) == ["scheduler_dead"]


def _denying(path_prefix: str, status: int) -> Callable[[Recorded], Reply]:
    """An api-server that is healthy but answers ``status`` on ``path_prefix``."""

    def answer(request: Recorded) -> Reply:
        if request.path.startswith(path_prefix):
            return Reply(status, {"detail": "Not authenticated"})
        if request.path.startswith("/api/v2/monitor/health"):
            return Reply(200, health())
        if request.path.startswith("/auth/token"):
            return Reply(201, {"access_token": "tok"})
        if request.path.startswith("/api/v2/jobs"):
            beat = datetime.now(timezone.utc).isoformat()
            job = {"id": 1, "job_type": "SchedulerJob", "state": "running", "latest_heartbeat": beat}
            return Reply(200, {"jobs": [job]})
        if "/dagRuns/~/taskInstances" in request.path:
            return Reply(200, {"task_instances": []})
        return Reply(200, {"dag_runs": [{"end_date": datetime.now(timezone.utc).isoformat()}]})

    return answer


@pytest.mark.parametrize(
    ("path", "status", "key", "severity", "auth"),
    [
        ("/api/v2/monitor/health", 401, "blind_spot:health", "critical", "token"),
        ("/api/v2/jobs", 401, "blind_spot:jobs", "warning", "token"),
        ("/api/v2/jobs", 403, "blind_spot:jobs", "warning", "user"),
        ("/api/v2/dags/canary/dagRuns", 403, "blind_spot:canary", "warning", "token"),
        ("/api/v2/dags/~/dagRuns/~/taskInstances", 401, "blind_spot:task_instances", "warning", "token"),
        ("/auth/token", 401, "blind_spot:login", "warning", "user"),
    ],
)
def test_refused_source_is_an_alert_and_once_exits_non_zero(
    path: str,
    status: int,
    key: str,
    severity: str,
    auth: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each endpoint answering 401/403 pages "monitoring blind spot" via the sinks; --once exits 1."""
    monkeypatch.setenv("CRASHSAFE_TEST_TOKEN", "wrong")
    credentials = (
        ["--api-token-env", "CRASHSAFE_TEST_TOKEN"]
        if auth == "token"
        else ["--api-user", "wd", "--api-password-env", "CRASHSAFE_TEST_TOKEN"]
    )
    with serve(_denying(path, status)) as airflow, serve() as hook:
        config = tmp_path / "watch.json"
        config.write_text(json.dumps({"sinks": [{"type": "webhook", "url": hook.url + "/h"}]}))
        code = _once(
            "--config",
            str(config),
            "--api-url",
            airflow.url,
            "--state-dir",
            str(tmp_path),
            "--canary-dag-id",
            "canary",
            "--canary-max-age",
            "600",
            *credentials,
        )
    assert code == 1
    assert key in capsys.readouterr().err
    (alert,) = [r.json() for r in hook.requests]
    assert alert["summary"].startswith("monitoring blind spot: ")
    assert f"answers HTTP {status}" in alert["summary"]
    assert alert["severity"] == severity
    assert ":api_unreachable:" not in alert["dedup_key"]
    assert list(StateFile(tmp_path / "state.json").load()) == [key]
