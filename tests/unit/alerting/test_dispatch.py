"""Fan-out, retries and the durable outbox: a failing sink never blocks or loses alerts."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.alerting import Alert, Dispatcher, FileOutbox, Sink, SinkError, build_sinks
from airflow_crashsafe.errors import ConfigurationError
from tests.support.httpserver import Reply, serve

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def _alert(event: str = "trigger", key: str = "dk") -> Alert:
    return Alert(key, event, "critical", "scheduler dead", "prod", T0, T0)


class Flaky(Sink):
    """Fails ``failures`` times, then records what it delivers."""

    kind = "flaky"

    def __init__(self, failures: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.failures = failures
        self.sent: list[tuple[str, str]] = []

    def send(self, alert: Alert) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise SinkError("down")
        self.sent.append((alert.dedup_key, alert.event))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failing_sink_does_not_block_the_others(tmp_path: Path) -> None:
    """One sink down: the others deliver; the failure is reported and spooled."""
    good, bad = Flaky(0, name="good"), Flaky(99, name="bad", retries=1)
    sleeps: list[float] = []
    dispatcher = Dispatcher([good, bad], outbox=FileOutbox(tmp_path / "o.jsonl"), sleep=sleeps.append)
    report = dispatcher.submit(_alert())
    assert good.sent == [("dk", "trigger")]
    assert [f[0] for f in report.failed] == ["bad"]
    assert report.pending == 1
    assert sleeps == [1.0]  # one immediate retry
    assert dispatcher.failures_total == {"good": 0, "bad": 1}


def test_spooled_alert_is_retried_later_in_order_and_survives_restart(tmp_path: Path) -> None:
    """After back-off a new dispatcher on the same file delivers trigger then resolve, in order."""
    clock, outbox = Clock(), FileOutbox(tmp_path / "o.jsonl")
    sink = Flaky(2, name="pd", retries=0)
    first = Dispatcher([sink], outbox=outbox, clock=clock, sleep=lambda _s: None)
    first.submit(_alert("trigger"))
    clock.now += 1  # still backing off: the resolve must wait behind the trigger
    assert first.submit(_alert("resolve")).pending == 2
    assert sink.sent == []
    clock.now += 10_000
    again = Dispatcher([sink], outbox=FileOutbox(tmp_path / "o.jsonl"), clock=clock, sleep=lambda _s: None)
    assert again.deliver().pending == 2  # the trigger fails once more; the resolve waits behind it
    clock.now += 10_000
    assert again.deliver().pending == 0
    assert sink.sent == [("dk", "trigger"), ("dk", "resolve")]


def test_expired_entries_are_dropped_loudly(caplog: pytest.LogCaptureFixture) -> None:
    """Past max_age an undeliverable alert is dropped with an error log, not silently."""
    clock = Clock()
    dispatcher = Dispatcher([Flaky(99, name="x", retries=0)], clock=clock, max_age=60, sleep=lambda _s: None)
    dispatcher.submit(_alert())
    clock.now += 61
    report = dispatcher.deliver()
    assert report.expired == [("x", "dk", "trigger")]
    assert report.pending == 0
    assert "giving up on alert dk" in caplog.text


def test_slow_sink_does_not_delay_a_fast_one() -> None:
    """Sinks run in parallel: a fast sink delivers while a slow one still waits."""
    release, delivered_fast = threading.Event(), threading.Event()

    class Slow(Sink):
        def send(self, alert: Alert) -> None:
            assert delivered_fast.wait(5)
            release.set()

    class Fast(Sink):
        def send(self, alert: Alert) -> None:
            delivered_fast.set()

    Dispatcher([Slow(name="slow"), Fast(name="fast")]).submit(_alert())
    assert release.is_set()


def test_real_webhook_retried_until_server_recovers(tmp_path: Path) -> None:
    """Against a real server answering 503 then 200, the spooled alert is delivered once it recovers."""
    status = [503]
    with serve(lambda _r: Reply(status[0])) as server:
        sinks = build_sinks([{"type": "webhook", "url": server.url + "/hook", "retries": 0}])
        clock = Clock()
        dispatcher = Dispatcher(sinks, outbox=FileOutbox(tmp_path / "o.jsonl"), clock=clock)
        assert dispatcher.submit(_alert()).pending == 1
        status[0] = 200
        clock.now += 10_000
        assert dispatcher.deliver().delivered == [("webhook", "dk", "trigger")]
    assert len(server.requests) == 2


def test_config_errors_name_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unknown types, missing env secrets and unknown fields are ConfigurationErrors saying what to fix."""
    monkeypatch.delenv("NOPE", raising=False)
    with pytest.raises(ConfigurationError, match="'type' must be one of"):
        build_sinks([{"type": "teams"}])
    with pytest.raises(ConfigurationError, match=r"NOPE .* not set"):
        build_sinks([{"type": "slack", "url_env": "NOPE"}])
    with pytest.raises(ConfigurationError, match="unknown field"):
        build_sinks([{"type": "slack", "url": "http://x", "colour": "red"}])
    with pytest.raises(ConfigurationError, match="unique"):
        build_sinks([{"type": "slack", "url": "http://x"}, {"type": "slack", "url": "http://y"}])
    monkeypatch.setenv("PD_KEY", "rk")
    (sink,) = build_sinks([{"type": "pagerduty", "routing_key_env": "PD_KEY", "min_severity": "critical"}])
    assert sink.name == "pagerduty"
    assert "rk" not in repr(sink)
