"""Crash tests: the task process is SIGKILLed at each point of a vendor push, then retried."""

from __future__ import annotations

import os
import signal

import pytest

from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor, Received
from tests.support.processes import ModuleRun, run_module

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Crash tests run each attempt in its own process; PostgreSQL is the production store."""
    from airflow_crashsafe.store import open_store, reset_store_cache

    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", request.getfixturevalue("postgres_url"))
    reset_store_cache()
    return open_store()


def run_attempt(
    try_number: int, crash_point: str, on_unknown: str = "resend", *, held: bool = False
) -> ModuleRun:
    """``python -m tests.support.http_task ...`` in a task process of its own (see ``processes.py``)."""
    return run_module("tests.support.http_task", str(try_number), crash_point, on_unknown, held=held)


def finish(process: ModuleRun) -> tuple[int, str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode is not None
    return process.returncode, out.strip().splitlines()[-1] if out.strip() else err[-2000:]


def kill_caller_on_first_request(vendor: KeyHonouringVendor | NaiveVendor, victim: list[int]) -> None:
    """The vendor receives the request, kills the caller, then books it: the worst moment."""

    def on_request(request: Received) -> None:
        if victim:
            os.kill(victim.pop(), signal.SIGKILL)

    vendor.on_request = on_request


@pytest.mark.parametrize("vendor_class", [KeyHonouringVendor, NaiveVendor])
def test_killed_before_intent_then_retry_books_once(
    store: Store, vendor_class: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed before the ledger recorded intent: nothing was sent; the retry books once."""
    with vendor_class() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        code, _ = finish(run_attempt(1, "before_intent"))
        assert code == -signal.SIGKILL
        assert vendor.received == []
        code, out = finish(run_attempt(2, "none"))
        assert (code, out) == (0, "pay_1")
        assert vendor.bookings == 1


def test_killed_mid_request_key_honouring_vendor_books_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after the request reached a key-honouring vendor: the resend replays, one booking."""
    with KeyHonouringVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        victim: list[int] = []
        kill_caller_on_first_request(vendor, victim)
        first = run_attempt(1, "none", held=True)
        victim.append(first.pid)
        first.release()
        code, _ = finish(first)
        assert code == -signal.SIGKILL
        code, out = finish(run_attempt(2, "none", "resend"))
        assert (code, out) == (0, "pay_1")
        assert vendor.bookings == 1
        assert len({r.headers["Idempotency-Key"] for r in vendor.received}) == 1


def test_killed_mid_request_naive_vendor_fail_policy_never_books_twice(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed mid-request with a vendor that ignores keys: 'fail' stops the retry, one booking."""
    with NaiveVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        victim: list[int] = []
        kill_caller_on_first_request(vendor, victim)
        first = run_attempt(1, "none", "fail", held=True)
        victim.append(first.pid)
        first.release()
        assert finish(first)[0] == -signal.SIGKILL
        code, out = finish(run_attempt(2, "none", "fail"))
        assert (code, out) == (3, "OutcomeUnknown")
        assert vendor.bookings == 1


@pytest.mark.parametrize("vendor_class", [KeyHonouringVendor, NaiveVendor])
def test_killed_after_outcome_recorded_retry_replays(
    store: Store, vendor_class: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed right after the outcome was recorded: the retry replays and sends nothing."""
    with vendor_class() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)
        assert finish(run_attempt(1, "after_outcome"))[0] == -signal.SIGKILL
        code, out = finish(run_attempt(2, "none"))
        assert (code, out) == (0, "pay_1")
        assert vendor.bookings == 1
        assert len(vendor.received) == 1
