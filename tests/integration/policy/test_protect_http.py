"""policy_mode=protect: the plain drill DAG's HTTP pushes, unchanged, pay once across a crash.

Each attempt runs in its own process (tests/support/policy_http_task.py); the vendor SIGKILLs the
first attempt when its request arrives and then books it — the crash at the worst moment. The
second attempt is the re-run Airflow starts after the scheduler's reset.
"""

from __future__ import annotations

import os
import signal

import pytest

from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor, Received
from tests.support.processes import ModuleRun, run_module

pytestmark = pytest.mark.integration


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> Store:
    """Attempts run in their own processes: the store is PostgreSQL, the production store."""
    from airflow_crashsafe.store import open_store, reset_store_cache

    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__POLICY_MODE", "protect")
    reset_store_cache()
    return open_store()


def attempt(task_id: str, try_number: int, held: bool = False) -> ModuleRun:
    """``python -m tests.support.policy_http_task ...`` in a task process of its own (``processes.py``)."""
    return run_module("tests.support.policy_http_task", task_id, str(try_number), held=held)


def finish(process: ModuleRun) -> tuple[int, str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode is not None
    return process.returncode, out.strip().splitlines()[-1] if out.strip() else err[-3000:]


def crash_on_first_request(vendor: NaiveVendor | KeyHonouringVendor, victim: list[int]) -> None:
    def on_request(request: Received) -> None:
        if victim:
            os.kill(victim.pop(), signal.SIGKILL)

    vendor.on_request = on_request


def test_naive_vendor_pays_once_across_a_crash(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vendor that books every request: the re-run sends nothing and stops for a person."""
    with NaiveVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_VENDOR_NAIVE", vendor.url)
        victim: list[int] = []
        crash_on_first_request(vendor, victim)
        first = attempt("push_payment_naive_p01", 1, held=True)
        victim.append(first.pid)
        first.release()
        code, _ = finish(first)
        assert code == -signal.SIGKILL
        assert vendor.bookings == 1
        code, out = finish(attempt("push_payment_naive_p01", 2))
        assert (code, out) == (3, "OutcomeUnknown")
        assert vendor.bookings == 1
        assert len(vendor.received) == 1


def test_key_honouring_vendor_pays_once_and_the_rerun_succeeds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vendor declared to honour keys: the re-run re-sends under the same key, booked once."""
    with KeyHonouringVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_VENDOR_KEYED", f"{vendor.url}?{HONOURS_KEYS_EXTRA}=true")
        victim: list[int] = []
        crash_on_first_request(vendor, victim)
        first = attempt("push_payment_keyed_p01", 1, held=True)
        victim.append(first.pid)
        first.release()
        code, _ = finish(first)
        assert code == -signal.SIGKILL
        code, out = finish(attempt("push_payment_keyed_p01", 2))
        assert code == 0, out
        assert vendor.bookings == 1
        keys = {r.headers.get("Idempotency-Key") for r in vendor.received}
        assert len(keys) == 1  # the DAG's per-attempt {{ ti.id }} key was replaced by the slot's key
        code, out = finish(attempt("push_payment_keyed_p01", 3))
        assert code == 0, out
        assert len(vendor.received) == 2  # a later retry replays from the ledger, sends nothing
