"""A new attempt that finds an older attempt's call still in flight awaits it and adopts its result."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_crashsafe.effects import effect
from airflow_crashsafe.effects.http_policy import HONOURS_KEYS_EXTRA
from airflow_crashsafe.errors import OutcomeUnknown
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import KeyHonouringVendor, NaiveVendor, fake_context
from airflow_crashsafe.testing.metrics import record_metrics
from tests.integration.effects.test_http_operator import ctx, push

pytestmark = pytest.mark.integration


def welcome(try_number: int) -> dict[str, Any]:
    return fake_context(dag_id="payouts", task_id="welcome", try_number=try_number)


def sms(try_number: int) -> dict[str, Any]:
    return fake_context(dag_id="payouts", task_id="sms", try_number=try_number)


def in_background(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``work`` in a thread (the old attempt, still running after a reset); its result or error."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.fixture
def vendor_conn(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], None]:
    """Point the connection ``vendor`` at a vendor started by the test (also seen by other threads).

    The connection declares what the vendor does with keys, as a user's would.
    """

    def point(vendor: Any) -> None:
        honours = "true" if isinstance(vendor, KeyHonouringVendor) else "false"
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", f"{vendor.url}?{HONOURS_KEYS_EXTRA}={honours}")

    return point


def test_effect_in_flight_is_awaited_and_its_result_adopted(store: Store) -> None:
    """The reset re-run waits for the old attempt's block to finish, returns its result unrun, counts both."""
    entered, release = threading.Event(), threading.Event()

    def old_attempt() -> Any:
        with effect("welcome-email", context=welcome(1), payload={"to": "ada"}) as fx:
            entered.set()
            release.wait(10)
            fx.done({"message_id": "m-1"})
        return fx.result

    thread, old = in_background(old_attempt)
    assert entered.wait(10)
    threading.Timer(0.5, release.set).start()
    ran_again = False
    with (
        record_metrics() as sent,
        effect("welcome-email", context=welcome(2), payload={"to": "ada"}, in_flight_wait=10) as fx,
    ):
        if fx.pending:
            ran_again = True
            fx.done({"message_id": "m-2"})
    thread.join(10)
    (waited,) = [s for s in sent.named() if s.kind == "timing"]
    assert waited.name == "crashsafe.ledger.in_flight_wait"
    assert waited.value >= 400  # ms: the old attempt was released after 0.5 s
    assert sent.count("crashsafe.ledger.adopted", dag_id="payouts", task_id="welcome") == 1
    assert old == {"result": {"message_id": "m-1"}}
    assert not ran_again
    assert fx.adopted
    assert fx.result == {"message_id": "m-1"}
    (event,) = store.events(dag_id="payouts", kinds=["adopted"])
    assert event["try_number"] == 2
    assert event["detail"]["adopted_try"] == 1
    assert event["detail"]["key"] == fx.key


def test_http_call_in_flight_is_adopted_even_with_a_naive_vendor(
    store: Store, vendor_conn: Callable[[Any], None]
) -> None:
    """A vendor that ignores keys still gets one request: the re-run adopts the old call's answer."""
    with NaiveVendor(processing_seconds=1.0) as vendor:
        vendor_conn(vendor)
        thread, old = in_background(lambda: push(on_unknown_outcome="fail").execute(ctx(1)))
        while not vendor.received:
            time.sleep(0.01)
        result = push(on_unknown_outcome="fail", in_flight_wait=10).execute(ctx(2))
        thread.join(10)
    assert len(vendor.received) == 1
    assert result == old["result"]
    assert result["body"]["payment_id"] == "pay_1"
    assert [e["kind"] for e in store.events(dag_id="payouts", kinds=["adopted"])] == ["adopted"]


def test_after_the_wait_a_resend_meets_the_vendors_409(
    store: Store, vendor_conn: Callable[[Any], None]
) -> None:
    """The wait is bounded: then the same key is re-sent and the vendor's 409 is awaited instead."""
    with KeyHonouringVendor(processing_seconds=2.0) as vendor:
        vendor_conn(vendor)
        thread, _ = in_background(lambda: push(in_progress_wait=10).execute(ctx(1)))
        while not vendor.received:
            time.sleep(0.01)
        began = time.monotonic()
        result = push(in_flight_wait=0.3, in_progress_wait=10).execute(ctx(2))
        waited = time.monotonic() - began
        thread.join(10)
    assert result["body"]["payment_id"] == "pay_1"
    assert vendor.bookings == 1
    assert len(vendor.received) >= 2  # the resend happened, before the original was booked
    # 0.3 s for the holder, then 409s asked again within the 10 s budget (full-jitter backoff: the
    # last sleep may run to the budget's end), then one more request: never the default 60 s waits.
    assert waited < 0.3 + 10 + 2
    assert store.events(dag_id="payouts", kinds=["adopted"]) == []


def test_fail_policy_names_the_wait_when_the_holder_never_answers(
    store: Store, vendor_conn: Callable[[Any], None]
) -> None:
    """With 'fail', an in-flight call that outlasts the wait is an unknown outcome; nothing re-sent."""
    with NaiveVendor(processing_seconds=2.0) as vendor:
        vendor_conn(vendor)
        thread, _ = in_background(lambda: push(on_unknown_outcome="fail").execute(ctx(1)))
        while not vendor.received:
            time.sleep(0.01)
        with pytest.raises(OutcomeUnknown, match=r"awaited for 0\.\d s"):
            push(on_unknown_outcome="fail", in_flight_wait=0.3).execute(ctx(2))
        thread.join(10)
    assert len(vendor.received) == 1


def test_holder_that_fails_ends_the_wait_at_once(store: Store) -> None:
    """When the awaited block fails (outcome unknown), the wait ends then, not at its budget."""
    entered = threading.Event()

    def old_attempt() -> None:
        with effect("sms", context=sms(1), payload=1):
            entered.set()
            time.sleep(0.3)
            raise RuntimeError("gateway hung up")

    thread, old = in_background(old_attempt)
    assert entered.wait(10)
    began = time.monotonic()
    with pytest.raises(OutcomeUnknown), effect("sms", context=sms(2), payload=1, in_flight_wait=30):
        pytest.fail("the block must not run")
    thread.join(10)
    assert isinstance(old["error"], RuntimeError)
    assert time.monotonic() - began < 10


def test_each_resend_refreshes_the_holders_sign_of_life(store: Store) -> None:
    """intent_at moves with every re-send, so a holder on another host stays alive while it retries."""
    from airflow_crashsafe.effects.calls import begin_call, record_send
    from airflow_crashsafe.store import ledger

    call = begin_call(target="payouts", request={"amount": 1}, context=ctx(1), store=store)
    record_send(call)  # the first send: already counted by the claim
    time.sleep(1.0)

    def age() -> float:
        db = store.connection()
        with db.autocommit():
            found = ledger.in_flight(db, call.key)
        assert found is not None
        return found[1]

    assert age() >= 0.9
    record_send(call)  # a re-send after a 5xx or a 409
    assert age() < 0.5
