"""effect(): the ledger for any side effect in TaskFlow code."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from airflow_crashsafe.effects import effect
from airflow_crashsafe.errors import CrashsafeError, IdempotencyConflict, OutcomeUnknown
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import fake_context
from airflow_crashsafe.testing.metrics import configured_stats_factory, initialize_stats, record_metrics

pytestmark = [pytest.mark.integration, pytest.mark.floor]  # floor: docs/packaging.md, "Version floor"


def ctx(try_number: int) -> dict:
    return fake_context(dag_id="crm", task_id="welcome_email", try_number=try_number)


def test_retry_after_done_skips_the_block_and_returns_the_result(store: Store) -> None:
    """The work runs once; a retry gets the recorded result back without running it."""
    sent: list[str] = []
    for try_number in (1, 2, 3):
        with effect("welcome-email", context=ctx(try_number), payload={"to": "ada@example.com"}) as fx:
            if fx.pending:
                sent.append(fx.key)
                fx.done({"message_id": "m-1"})
        assert fx.result == {"message_id": "m-1"}
    assert len(sent) == 1


def test_block_that_raises_leaves_outcome_unknown(store: Store) -> None:
    """A block that fails may have acted: the next try stops with OutcomeUnknown by default."""

    def failing_send() -> None:
        with effect("welcome-email", context=ctx(1), payload=1) as fx:
            assert fx.pending
            raise RuntimeError("smtp hung up")

    def retry() -> None:
        with effect("welcome-email", context=ctx(2), payload=1):
            pytest.fail("the block must not run")

    with pytest.raises(RuntimeError):
        failing_send()
    with pytest.raises(OutcomeUnknown, match="welcome-email"):
        retry()


def test_resend_policy_runs_the_block_again_after_unknown(store: Store) -> None:
    """With on_unknown_outcome='resend' the block runs again, with the same key."""
    keys = []

    def failing_send() -> None:
        with effect("sms", context=ctx(1), payload=1) as fx:
            keys.append(fx.key)
            raise RuntimeError("timeout")

    with pytest.raises(RuntimeError):
        failing_send()
    with effect("sms", context=ctx(2), payload=1, on_unknown_outcome="resend") as fx:
        assert fx.pending
        keys.append(fx.key)
        fx.done("ok")
    assert keys[0] == keys[1]


def test_payload_change_is_a_conflict(store: Store) -> None:
    """Another payload under the same key is refused before the block runs."""
    with effect("sms", context=ctx(1), payload={"text": "hi"}) as fx:
        fx.done()
    with pytest.raises(IdempotencyConflict), effect("sms", context=ctx(2), payload={"text": "bye"}):
        pytest.fail("the block must not run")


def test_done_twice_is_an_error(store: Store) -> None:
    """Calling done() twice is a programming error, said plainly."""
    with effect("sms", context=ctx(1), payload=None) as fx:
        fx.done()
        with pytest.raises(CrashsafeError, match="already done"):
            fx.done()


def test_unknown_outcomes_and_replays_reach_airflow_metrics(store: Store) -> None:
    """An unknown outcome, its refusal, its resend and a replay are each counted in Stats."""
    tags = {"dag_id": "crm", "task_id": "welcome_email"}
    with record_metrics() as sent:
        with pytest.raises(RuntimeError), effect("sms", context=ctx(1), payload=1):
            raise RuntimeError("timeout")
        with pytest.raises(OutcomeUnknown), effect("sms", context=ctx(2), payload=1):
            pytest.fail("the block must not run")
        with effect("sms", context=ctx(3), payload=1, on_unknown_outcome="resend") as fx:
            fx.done("sent")
        with effect("sms", context=ctx(4), payload=1) as fx:
            assert fx.replayed
    assert [(s.name, s.tags.get("action")) for s in sent.named()] == [
        ("crashsafe.ledger.unknown_outcome", None),
        ("crashsafe.ledger.unknown_outcome_found", "refused"),
        ("crashsafe.ledger.unknown_outcome_found", "resent"),
        ("crashsafe.ledger.replayed", None),
    ]
    assert all(s.tags.items() >= tags.items() for s in sent.named())


def test_a_replay_reaches_a_real_statsd_listener(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """With [metrics] statsd_on, a replay arrives as a StatsD packet under Airflow's prefix."""
    pytest.importorskip("statsd", reason="Airflow's StatsD backend needs the statsd package")

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(5)
        for option, value in {
            "STATSD_ON": "True",
            "STATSD_HOST": "127.0.0.1",
            "STATSD_PREFIX": "airflow",
        }.items():
            monkeypatch.setenv(f"AIRFLOW__METRICS__{option}", value)
        monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.getsockname()[1]))
        made: list[Any] = []

        def factory() -> Any:  # [metrics]' factory, as the task runner installs it; kept to close it
            made.append(configured_stats_factory()())
            return made[-1]

        initialize_stats(factory)
        try:
            for try_number in (1, 2):
                with effect("receipt", context=ctx(try_number), payload=1) as fx:
                    if fx.pending:
                        fx.done("r-1")
            packet = listener.recv(1024).decode()
        finally:
            for backend in made:
                backend.statsd.close()
            for option in ("STATSD_ON", "STATSD_HOST", "STATSD_PREFIX", "STATSD_PORT"):
                monkeypatch.delenv(f"AIRFLOW__METRICS__{option}")  # or the restored backend is StatsD too
            with record_metrics():
                pass  # puts back the backend [metrics] configures
    assert packet == "airflow.crashsafe.ledger.replayed:1|c"
