"""The Celery worker pool rule: a watched queue with no live consumer pages after the worker threshold."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_crashsafe.alerting.model import Alert
from airflow_crashsafe.watchdog.health import JobRecord, Observation
from airflow_crashsafe.watchdog.rules import Rules, evaluate

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def seen(alerts: list[Alert]) -> list[tuple[str, str, str]]:
    """(incident key, severity, event) of each alert; the key is the dedup key's third part."""
    return [(a.dedup_key.split(":")[2], a.severity, a.event) for a in alerts]


RULES = Rules(celery_queues=("default", "host-b"), worker_threshold=60.0)


def obs(seconds: float, **kwargs: object) -> Observation:
    at = T0 + timedelta(seconds=seconds)
    alive = JobRecord("scheduler", at, state="running", job_id=1, hostname="h1")
    return Observation(at=at, source="db", jobs=(alive,), exists={"scheduler": True}, **kwargs)  # type: ignore[arg-type]


def test_unserved_queue_pages_only_after_the_worker_threshold() -> None:
    """host-b loses its last worker: nothing at once or at 59 s, a critical page at 60 s; default is fine."""
    served = {"default": ("celery@worker-a",)}
    incidents, alerts = evaluate({}, obs(0, queue_consumers=served), RULES)
    assert alerts == []
    incidents, alerts = evaluate(incidents, obs(59, queue_consumers=served), RULES)
    assert alerts == []
    incidents, alerts = evaluate(incidents, obs(60, queue_consumers=served), RULES)
    assert seen(alerts) == [("celery_queue_unserved", "critical", "trigger")]
    assert "host-b" in alerts[0].dedup_key
    back = {"default": ("celery@worker-a",), "host-b": ("celery@worker-b",)}
    _, alerts = evaluate(incidents, obs(70, queue_consumers=back), RULES)
    assert [(key, event) for key, _, event in seen(alerts)] == [("celery_queue_unserved", "resolve")]


def test_a_queue_served_again_within_the_threshold_never_pages() -> None:
    """A worker restart (queue unserved for 30 s) is not an incident."""
    incidents, _ = evaluate({}, obs(0, queue_consumers={}), RULES)
    incidents, alerts = evaluate(
        incidents, obs(30, queue_consumers={"default": ("a",), "host-b": ("b",)}), RULES
    )
    assert alerts == []
    _, alerts = evaluate(incidents, obs(90, queue_consumers={"default": ("a",), "host-b": ("b",)}), RULES)
    assert alerts == []


def test_broker_unreachable_pages_and_queues_are_not_judged() -> None:
    """No answer from the broker: one page saying so, no guess about the queues."""
    _, alerts = evaluate({}, obs(0, broker_error="ConnectionError: refused"), RULES)
    assert seen(alerts) == [("celery_broker_unreachable", "critical", "trigger")]


def test_without_watched_queues_the_pool_is_ignored() -> None:
    """The default rules watch no queue: an empty pool says nothing."""
    _, alerts = evaluate({}, obs(0, queue_consumers={}), Rules())
    assert alerts == []
