"""Progress while the drill waits: a line at least every ``every`` seconds, so a long wait (the
runs finishing, the outage) is never minutes of silence.

A :class:`Ticker` is called from a wait loop on every poll; it prints only when ``every`` seconds
passed since the wait began or since its last line, saying what it waits for, for how long, and
the status the caller can tell (tasks done of total). The drill's report is not affected: these
are progress lines on stdout, like the phase lines of :class:`~drill.scenario.Progress`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["EVERY", "Ticker", "sleep_reporting"]

#: Seconds between two progress lines of one wait.
EVERY = 10.0


class Ticker:
    """Prints "still waiting for <what>: <n> s; <status>" at most every ``every`` seconds."""

    def __init__(
        self,
        echo: Callable[[str], None],
        what: str,
        status: Callable[[], str | None] | None = None,
        *,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.echo = echo
        self.what = what
        self.status = status
        self.every = every
        self.clock = clock
        self.started = self.last = clock()

    def __call__(self) -> None:
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        line = f"still waiting for {self.what}: {now - self.started:.0f} s"
        try:
            told = self.status() if self.status is not None else None
        except Exception as exc:  # a status that cannot be read must not end the wait
            told = f"status unavailable ({type(exc).__name__})"
        self.echo(f"{line}; {told}" if told else line)


def sleep_reporting(
    seconds: float,
    ticker: Ticker,
    *,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """``time.sleep(seconds)`` in steps of at most a second, letting ``ticker`` report between them."""
    end = clock() + seconds
    while (left := end - clock()) > 0:
        sleep(min(1.0, left))
        ticker()
