"""A per-test time limit that nothing inside the test can disarm or catch.

pytest-timeout's signal method (the ini's ``timeout``) arms SIGALRM and raises ``Failed`` in the
test: a plain failure whose fixtures still tear down (a drill stops its Airflow). Two things defeat
it, so it is not enough alone:

- Airflow installs its own SIGALRM handler and disarms the timer when done (DagBag's
  import timeout, the task SDK's ``timeout``, ``airflow.utils.db``): after a test parses a DAG
  file, the rest of it runs with no limit;
- code that catches the ``Failed`` keeps running with the one-shot alarm spent: Hypothesis takes it
  for a failing example and replays examples to shrink it, so a property that blocks blocks again.

So each test is also watched by a timer thread, which neither can touch: if the test is still in
its protocol (setup, call, teardown) ``timeout_backstop_grace`` seconds after its limit, the thread
dumps every thread's stack to stderr and ends the process with ``os._exit``. Under pytest-xdist the
controller reports that test as failed ("worker crashed") and the run goes on on a new worker; in
one process the run ends there, failed.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["EXIT_STATUS", "GRACE_INI", "end_process"]

#: The ini option: seconds a test may run past its limit before its process is ended.
GRACE_INI = "timeout_backstop_grace"
#: The status the process ends with (pytest's own "tests failed").
EXIT_STATUS = 1

_BACKSTOP = pytest.StashKey[threading.Timer]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        GRACE_INI,
        "Seconds a test may run past its pytest-timeout limit (its alarm disarmed or its failure "
        "caught) before its process is ended (tests/plugins/time_limit.py).",
        default="60",
    )


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> None:
    """Start the backstop beside pytest-timeout's own alarm (returning None lets it arm that too)."""
    if _BACKSTOP in item.stash:  # func_only: the protocol's timer already covers the call
        return
    grace = float(item.config.getini(GRACE_INI))
    limit = float(settings.timeout)
    timer = threading.Timer(limit + grace, end_process, (item, limit, grace))
    timer.name = f"time-limit backstop: {item.nodeid}"
    timer.daemon = True
    item.stash[_BACKSTOP] = timer
    timer.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Stop the backstop only when the whole protocol is over: pytest-timeout cancels its own alarm
    as soon as a test fails (for pdb), which would leave a failed test's teardown with no limit."""
    try:
        return (yield)
    finally:
        timer = item.stash.get(_BACKSTOP, None)
        if timer is not None:
            del item.stash[_BACKSTOP]
            timer.cancel()


def end_process(item: pytest.Item, limit: float, grace: float) -> None:
    """Say which test overran and where every thread is, then end this process (not a debugger's)."""
    from pytest_timeout import is_debugging

    if is_debugging():
        return
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        with contextlib.suppress(Exception):  # the process ends either way; the message matters more
            capture.suspend_global_capture(in_=True)  # what follows goes to the real stderr
    stream = sys.__stderr__ or sys.stderr
    stream.write(
        f"\n+++ time limit: {item.nodeid} still runs {grace:g} s after its {limit:g} s limit "
        "(its alarm disarmed, its failure caught or its teardown stuck); ending the process +++\n"
    )
    stream.flush()
    faulthandler.dump_traceback(file=stream, all_threads=True)
    stream.flush()
    os._exit(EXIT_STATUS)
