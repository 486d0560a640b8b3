"""The drill's progress while it waits: a line at least every 10 s, saying what, how long, how far."""

from __future__ import annotations

import pytest

from drill.components import wait_until
from drill.scenario import Progress
from drill.waiting import Ticker, sleep_reporting


class Clock:
    """A clock the test moves; sleeping moves it too."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_line_every_ten_seconds_with_elapsed_time_and_status() -> None:
    """Polls within 10 s print nothing; each 10 s of waiting prints one line with the status."""
    clock, lines = Clock(), []
    done = iter(range(100))
    ticker = Ticker(
        lines.append, "the DAG runs to finish", lambda: f"tasks {next(done)}/30 done", clock=clock
    )
    for _ in range(25):  # 25 polls, 2 s apart: 50 s
        clock.sleep(2.0)
        ticker()
    assert lines == [
        "still waiting for the DAG runs to finish: 10 s; tasks 0/30 done",
        "still waiting for the DAG runs to finish: 20 s; tasks 1/30 done",
        "still waiting for the DAG runs to finish: 30 s; tasks 2/30 done",
        "still waiting for the DAG runs to finish: 40 s; tasks 3/30 done",
        "still waiting for the DAG runs to finish: 50 s; tasks 4/30 done",
    ]


def test_a_status_that_fails_does_not_end_the_wait() -> None:
    """An API hiccup while reading the status is reported in the line, not raised."""
    clock, lines = Clock(), []

    def broken() -> str:
        raise OSError("api-server restarting")

    ticker = Ticker(lines.append, "the outage to pass", broken, clock=clock)
    clock.sleep(10.0)
    ticker()
    assert lines == ["still waiting for the outage to pass: 10 s; status unavailable (OSError)"]


def test_a_long_sleep_reports_while_it_sleeps() -> None:
    """A 35 s outage sleeps 35 s in all and prints three lines, without a status when none is given."""
    clock, lines = Clock(), []
    ticker = Ticker(lines.append, "the outage to pass", clock=clock)
    sleep_reporting(35.0, ticker, sleep=clock.sleep, clock=clock)
    assert clock.now == 1035.0
    assert lines == [f"still waiting for the outage to pass: {s} s" for s in (10, 20, 30)]


def test_wait_until_ticks_between_polls_and_progress_prefixes_the_elapsed_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """wait_until calls the ticker after each unsuccessful poll; Progress lines carry the drill's time."""
    echoed: list[str] = []
    progress = Progress(echo=echoed.append)
    ticks: list[int] = []
    answers = iter([False, False, True])
    monkeypatch.setattr("drill.components.time.sleep", lambda _s: None)
    assert wait_until("x", lambda: next(answers), 60, tick=lambda: ticks.append(1)) is True
    assert len(ticks) == 2
    ticker = progress.waiting("the DAG runs to finish", lambda: "tasks 3/4 done")
    ticker.started -= 10.0
    ticker.last -= 10.0
    ticker()
    [line] = echoed
    assert line.startswith("[")
    assert line.endswith("s] still waiting for the DAG runs to finish: 10 s; tasks 3/4 done")
