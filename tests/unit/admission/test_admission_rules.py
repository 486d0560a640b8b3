"""Recovery admission without a server: who is a recovery re-run, deadlines, jitter, the trigger's form."""

from __future__ import annotations

import json
from datetime import datetime, time, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.admission import recovery_admission
from airflow_crashsafe.admission.lease import MAX_POLL_SECONDS, jittered
from airflow_crashsafe.admission.rules import deadline_epoch, downstream_count, recovery_verdict
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.store import attempts
from airflow_crashsafe.store.admission import NO_DEADLINE
from airflow_crashsafe.store.store import Store, open_store
from airflow_crashsafe.testing.context import fake_context
from airflow_crashsafe.triggers.admission import RecoveryAdmissionTrigger

RUN = "scheduled__2026-11-29T00:00:00+00:00"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """An embedded SQLite store of this test's own."""
    return open_store(f"sqlite:///{tmp_path / 'store.db'}")


def _record(store: Store, try_number: int, *, end_source: str | None, pid: int = 11) -> None:
    row: dict[str, Any] = {
        **dict.fromkeys(attempts.KEY),
        **dict.fromkeys(attempts.VALUES),
        "dag_id": "example_dag",
        "task_id": "example_task",
        "map_index": -1,
        "run_id": RUN,
        "try_number": try_number,
        "hostname": "worker-1",
        "pid": pid,
        "started_at": datetime(2026, 11, 29, 0, 1, tzinfo=timezone.utc),
        "start_source": "listener",
    }
    if end_source is not None:
        row.update(ended_at=datetime(2026, 11, 29, 0, 5, tzinfo=timezone.utc), end_source=end_source)
    with store.transaction() as db:
        attempts.record(db, SimpleNamespace(as_row=lambda: row))


def test_first_try_is_never_a_recovery_rerun(store: Store) -> None:
    """try_number 1 is a first try, whatever the store holds."""
    assert not recovery_verdict(fake_context(try_number=1), store).recovery


def test_rerun_of_a_try_that_never_reported_its_end_is_a_recovery(store: Store) -> None:
    """An earlier try with no end of its own (reset, lost worker) makes the next try a recovery re-run."""
    _record(store, 1, end_source=None)
    verdict = recovery_verdict(fake_context(try_number=2), store)
    assert verdict.recovery
    assert "try 1" in verdict.reason


def test_rerun_after_the_schedulers_heartbeat_timeout_is_a_recovery(store: Store) -> None:
    """An earlier try ended by the scheduler (heartbeat timeout) makes the next try a recovery re-run."""
    _record(store, 1, end_source="scheduler")
    assert recovery_verdict(fake_context(try_number=2), store).recovery


def test_retry_after_the_tasks_own_failure_is_not_a_recovery(store: Store) -> None:
    """Earlier tries that reported their own end make a normal retry: never delayed."""
    _record(store, 1, end_source="listener")
    assert not recovery_verdict(fake_context(try_number=2), store).recovery


def test_rerun_without_any_record_of_earlier_tries_is_assumed_a_recovery(store: Store) -> None:
    """No audit record of the earlier tries: the re-run asks for a place (cheap when places are free)."""
    assert recovery_verdict(fake_context(try_number=3), store).recovery


def test_budget_zero_turns_admission_off_without_touching_the_store(tmp_path: Path) -> None:
    """recovery_concurrency=0: a re-run gets no lease and the store is never opened."""
    never = Store(lambda: (_ for _ in ()).throw(AssertionError("store opened")), location="nowhere")
    with recovery_admission(
        "warehouse", context=fake_context(try_number=2), concurrency=0, store=never
    ) as lease:
        assert lease is None


def test_negative_budget_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative budget, as an argument or an option, says what to set."""
    with (
        pytest.raises(ConfigurationError, match="recovery_concurrency"),
        recovery_admission("warehouse", context=fake_context(try_number=2), concurrency=-1),
    ):
        pass
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__RECOVERY_CONCURRENCY", "-2")
    with pytest.raises(ConfigurationError, match="recovery_concurrency"):
        config.recovery_concurrency()


def test_default_budget_is_four() -> None:
    """[crashsafe] recovery_concurrency defaults to 4 places per resource."""
    assert config.recovery_concurrency() == 4


def test_deadline_forms() -> None:
    """A datetime is itself; a time of day is its first occurrence after the run starts; none ranks last."""
    context = fake_context()
    context["dag_run"].run_after = datetime(2026, 11, 29, 0, 30, tzinfo=timezone.utc)
    six = datetime(2026, 11, 29, 6, 0, tzinfo=timezone.utc).timestamp()
    assert deadline_epoch(datetime(2026, 11, 29, 6, 0, tzinfo=timezone.utc), context) == six
    assert deadline_epoch(time(6, 0), context) == six
    assert deadline_epoch("06:00", context) == six
    assert deadline_epoch("2026-11-29T06:00:00+00:00", context) == six
    assert deadline_epoch(time(0, 15), context) == six + timedelta(hours=18, minutes=15).total_seconds()
    assert deadline_epoch("07:00+01:00", context) == six
    assert deadline_epoch(None, context) == NO_DEADLINE
    with pytest.raises(ConfigurationError, match="deadline"):
        deadline_epoch("at dawn", context)


def test_downstream_count_reads_the_task() -> None:
    """The number of tasks downstream comes from context['task']; none without a task."""
    task = SimpleNamespace(get_flat_relative_ids=lambda upstream: {"a", "b", "c"})
    assert downstream_count({"task": task}) == 3
    assert downstream_count({}) == 0


def test_polls_are_jittered_and_capped() -> None:
    """Pauses grow, stay within ±50 % of their step, and never exceed 1.5 x the cap."""
    pauses = [jittered(n) for n in range(40)]
    assert len({round(p, 6) for p in pauses}) > 30
    assert all(p <= MAX_POLL_SECONDS * 1.5 for p in pauses)
    assert jittered(0) <= 0.3


def test_trigger_round_trips_through_its_serialized_form() -> None:
    """serialize() names the class and plain JSON kwargs from which an equal trigger is rebuilt."""
    trigger = RecoveryAdmissionTrigger(holder=7, resource="warehouse", k=4, give_up_at=1.5e9, store_url=None)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_crashsafe.triggers.admission.RecoveryAdmissionTrigger"
    rebuilt = RecoveryAdmissionTrigger(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs == {
        "holder": 7,
        "resource": "warehouse",
        "k": 4,
        "give_up_at": 1.5e9,
        "store_url": None,
        "max_poll": MAX_POLL_SECONDS,
    }
