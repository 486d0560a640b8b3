"""The operators wait for a recovery place deferred, and resume admitted, against real PostgreSQL.

The budget is filled by another re-run holding ``recovery_admission``; the triggerer's part is
played by running :class:`RecoveryAdmissionTrigger` in-process after a round trip through its
serialized form, exactly as the triggerer rebuilds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import TaskDeferred

from airflow_crashsafe.admission import recovery_admission
from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.operators import PartitionOverwriteOperator
from airflow_crashsafe.operators.http import IdempotentHttpOperator
from airflow_crashsafe.store import admission as sql
from airflow_crashsafe.store.store import Store, open_store, reset_store_cache
from airflow_crashsafe.testing import NaiveVendor, fake_context
from airflow_crashsafe.triggers.admission import RecoveryAdmissionTrigger
from tests.support.airflow_health import api_server_health, health_body
from tests.support.sql_target import SqlTarget

pytestmark = pytest.mark.integration

DAY = "2024-01-02"


@pytest.fixture(autouse=True)
def _healthy_triggerer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A triggerer heartbeats (the api-server's health says so), so a waiting re-run defers."""
    with api_server_health(monkeypatch, health_body()):
        yield


@pytest.fixture
def store(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The configured crashsafe store on PostgreSQL (the trigger opens the same one)."""
    monkeypatch.setenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", postgres_url)
    reset_store_cache()
    yield open_store()
    reset_store_cache()


@pytest.fixture
def target(postgres_url: str, airflow_conn: Callable[[str, str], str]) -> SqlTarget:
    """The warehouse: a PostgreSQL database as the connection ``warehouse``, with a revenue table."""
    target = SqlTarget(
        conn_id=airflow_conn("warehouse", postgres_url), url=postgres_url, dialect="postgresql"
    )
    target.run("CREATE TABLE revenue (day TEXT NOT NULL, region TEXT NOT NULL, amount INTEGER NOT NULL)")
    return target


@contextmanager
def _budget_full(store: Store, resource: str) -> Iterator[None]:
    """Another re-run holds the only place of ``resource`` for the block."""
    with recovery_admission(
        resource, context=fake_context(task_id="other", try_number=2), concurrency=1, store=store
    ):
        yield


def _load(target: SqlTarget) -> PartitionOverwriteOperator:
    return PartitionOverwriteOperator(
        task_id="load_revenue",
        conn_id=target.conn_id,
        target_table="revenue",
        partition={"day": DAY},
        sql=f"SELECT '{DAY}' AS day, 'eu' AS region, 10 AS amount",
        recovery_concurrency=1,
    )


def _deferred(run: Callable[[], Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        run()
    assert deferred.value.method_name == "resume_after_admission"
    assert isinstance(deferred.value.trigger, RecoveryAdmissionTrigger)
    return deferred.value


def _fire(deferred: TaskDeferred) -> dict[str, Any]:
    """Rebuild the trigger from its serialized form and run it until its first event."""
    classpath, kwargs = deferred.trigger.serialize()
    assert classpath == "airflow_crashsafe.triggers.admission.RecoveryAdmissionTrigger"
    trigger = RecoveryAdmissionTrigger(**{**kwargs, "max_poll": 0.1})

    async def first() -> dict[str, Any]:
        events = trigger.run()
        try:
            return dict((await anext(events)).payload)
        finally:
            await events.aclose()  # as the triggerer does: the trigger closes its store connection

    return asyncio.run(asyncio.wait_for(first(), timeout=30))


def _resume(op: Any, context: dict[str, Any], deferred: TaskDeferred, event: dict[str, Any]) -> Any:
    return op.resume_execution(deferred.method_name, {**(deferred.kwargs or {}), "event": event}, context)


def _rows(store: Store, resource: str) -> list[Any]:
    with store.transaction() as db:
        return list(sql.rows(db, resource))


def test_sql_operator_defers_when_the_budget_is_full_and_resumes_admitted(
    store: Store, target: SqlTarget
) -> None:
    """A re-run of a load defers with the admission trigger, then writes once the place is its own."""
    context = fake_context(task_id="load_revenue", try_number=2)
    with _budget_full(store, "warehouse"):
        deferred = _deferred(lambda: _load(target).execute(context))
        assert target.rows("SELECT * FROM revenue") == []
        waiting = [r for r in _rows(store, "warehouse") if r["state"] == "waiting"]
        assert len(waiting) == 1
        assert waiting[0]["pid"] == 0  # handed to the triggerer: only its beacon keeps it
    event = _fire(deferred)
    assert event["status"] == "admitted"
    _resume(_load(target), context, deferred, event)
    assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
    assert _rows(store, "warehouse") == []  # released at the end
    assert [e["task_id"] for e in store.events(kinds=[sql.WAITED_EVENT])] == ["load_revenue"]


def test_a_place_won_by_a_rerun_fenced_out_meanwhile_is_given_back(store: Store, target: SqlTarget) -> None:
    """A newer try committed the slot while the re-run waited: resumed, it is fenced out before
    its work and still frees the place it won; the resume travels as an argument, so the operator
    keeps no admission state."""
    context = fake_context(task_id="load_revenue", try_number=2)
    with _budget_full(store, "warehouse"):
        deferred = _deferred(lambda: _load(target).execute(context))
    event = _fire(deferred)
    assert event["status"] == "admitted"
    committer = _load(target)
    committer.recovery_concurrency = 0  # a later try, admission off, commits the slot meanwhile
    committer.execute(fake_context(task_id="load_revenue", try_number=3))
    op = _load(target)
    with pytest.raises(FencedOut):
        _resume(op, context, deferred, event)
    assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
    assert _rows(store, "warehouse") == []
    assert not [name for name in vars(op) if "resum" in name]


def test_sql_operator_first_try_and_free_budget_proceed_at_once(store: Store, target: SqlTarget) -> None:
    """Try 1 with a full budget, and a re-run with a free place, both write without deferring."""
    with _budget_full(store, "warehouse"):
        _load(target).execute(fake_context(task_id="load_revenue", try_number=1))
    target.run("DELETE FROM revenue", "DELETE FROM crashsafe_fences")
    _load(target).execute(fake_context(task_id="load_revenue", try_number=3))
    assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
    assert store.events(kinds=[sql.WAITED_EVENT]) == []


def test_http_operator_defers_when_the_budget_is_full_and_sends_once_admitted(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IdempotentHttpOperator's re-run defers before the ledger sees it, then sends once."""
    with NaiveVendor() as vendor:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", vendor.url)

        def push() -> IdempotentHttpOperator:
            return IdempotentHttpOperator(
                task_id="push_payment",
                http_conn_id="vendor",
                endpoint="/payments",
                json={"amount_cents": 100},
                recovery_concurrency=1,
            )

        context = fake_context(task_id="push_payment", try_number=2)
        with _budget_full(store, "vendor"):
            deferred = _deferred(lambda: push().execute(context))
            assert vendor.received == []
        event = _fire(deferred)
        result = _resume(push(), context, deferred, event)
        assert result["status"] == 201
        assert len(vendor.booked) == 1
    assert _rows(store, "vendor") == []


def test_trigger_times_out_and_the_rerun_goes_ahead_over_budget(
    store: Store, target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past its bound the trigger fires a timeout; the resumed re-run writes without a place."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__RECOVERY_WAIT_SECONDS", "0.5")
    context = fake_context(task_id="load_revenue", try_number=2)
    with _budget_full(store, "warehouse"):
        deferred = _deferred(lambda: _load(target).execute(context))
        event = _fire(deferred)
        assert event["status"] == "timeout"
        _resume(_load(target), context, deferred, event)
        assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
        assert [r["state"] for r in _rows(store, "warehouse")] == ["admitted"]  # the other's place only


def test_without_a_triggerer_a_rerun_waits_for_its_place_in_the_worker(
    store: Store, target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No live triggerer: the re-run never defers (it would never resume); it waits here, bounded."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__RECOVERY_WAIT_SECONDS", "1")
    context = fake_context(task_id="load_revenue", try_number=2)
    with api_server_health(monkeypatch, health_body(triggerer=None)), _budget_full(store, "warehouse"):
        _load(target).execute(context)  # no TaskDeferred: waited in the worker, then went ahead
    assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
    assert _rows(store, "warehouse") == []


def test_a_wait_the_triggerer_never_answered_goes_on_in_the_worker(
    store: Store, target: SqlTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferral for a place that Airflow timed out (stalled triggerer) waits here, then writes."""
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__RECOVERY_WAIT_SECONDS", "1")
    context = fake_context(task_id="load_revenue", try_number=2)
    with _budget_full(store, "warehouse"):
        deferred = _deferred(lambda: _load(target).execute(context))
        assert deferred.timeout is not None  # Airflow ends the deferral if no triggerer answers
        timed_out = {"error": TriggerFailureReason.TRIGGER_TIMEOUT.value}
        _load(target).resume_execution(TRIGGER_FAIL_REPR, timed_out, context)  # no TaskDeferred again
        assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
    # Left: only the unanswered deferral's waiting row, which dies when its lease passes unrenewed.
    assert [r["state"] for r in _rows(store, "warehouse")] == ["waiting"]


def test_a_hand_off_the_store_refuses_lets_the_rerun_write_with_a_warning(
    store: Store, target: SqlTarget, caplog: pytest.LogCaptureFixture
) -> None:
    """The store refuses the waiting row's hand-off to the trigger: admission fails open (the
    re-run writes at once, a warning says why) and the row is freed rather than left waiting."""
    store.migrate()
    target.run(
        "CREATE FUNCTION refuse_hand_off() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'hand-off refused by the store'; END $$",
        "CREATE TRIGGER refuse_hand_off BEFORE UPDATE ON crashsafe_admission FOR EACH ROW "
        "WHEN (NEW.pid = 0 AND OLD.pid <> 0) EXECUTE FUNCTION refuse_hand_off()",
    )
    context = fake_context(task_id="load_revenue", try_number=2)
    with _budget_full(store, "warehouse"), caplog.at_level("WARNING", "airflow_crashsafe.admission"):
        _load(target).execute(context)  # no TaskDeferred and no error: it went ahead
        assert target.rows("SELECT * FROM revenue") == [(DAY, "eu", 10)]
        assert [r["state"] for r in _rows(store, "warehouse")] == ["admitted"]  # the other's place only
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("recovery admission unavailable" in w and "hand-off refused" in w for w in warnings)
