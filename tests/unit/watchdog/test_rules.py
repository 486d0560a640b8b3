"""Pure incident rules: aliveness, grace, repeat, HA, blindness and the canary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_crashsafe.alerting.incidents import Incident
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.health import JobRecord, Observation, parse_health
from airflow_crashsafe.watchdog.rules import Rules, conditions, evaluate, is_alive

T0 = datetime(2026, 1, 1, 3, 0, tzinfo=timezone.utc)


def sched(age: float, state: str | None = "running", job_id: int = 1, at: datetime = T0) -> JobRecord:
    """A scheduler job whose heartbeat is ``age`` seconds old at ``at``."""
    return JobRecord(
        "scheduler", at - timedelta(seconds=age), state=state, job_id=job_id, hostname=f"h{job_id}"
    )


def obs(*jobs: JobRecord, at: datetime = T0, **kwargs: object) -> Observation:
    return Observation(at=at, source="db", jobs=jobs, exists={"scheduler": True}, **kwargs)  # type: ignore[arg-type]


@given(
    age=st.floats(min_value=-100, max_value=1000),
    state=st.sampled_from(["running", "success", "failed", None]),
)
def test_alive_means_running_and_fresh(age: float, state: str | None) -> None:
    """Alive exactly when the state is running (or unknown) and the heartbeat is under the threshold."""
    assert is_alive(sched(age, state), T0, 30) == (state in ("running", None) and age < 30)


def test_health_verdict_unhealthy_is_dead_even_with_fresh_beat() -> None:
    """Airflow's own 'unhealthy' (e.g. a gracefully stopped job) wins over a fresh heartbeat."""
    assert not is_alive(JobRecord("scheduler", T0, reported_healthy=False), T0, 30)


def test_grace_then_open_then_repeat_then_resolve() -> None:
    """Pending for the grace, one trigger, repeats at the interval, one resolve."""
    rules = Rules(grace=30, repeat_interval=100)
    incidents: dict[str, Incident] = {}
    sent = []
    for second in range(0, 250, 10):
        at = T0 + timedelta(seconds=second)
        incidents, alerts = evaluate(incidents, obs(sched(60, at=at), at=at), rules)
        sent += [(second, a.event) for a in alerts]
    at = T0 + timedelta(seconds=260)
    incidents, alerts = evaluate(incidents, obs(sched(0, job_id=2, at=at), at=at), rules)
    sent += [(260, a.event) for a in alerts]
    assert sent == [(30, "trigger"), (130, "repeat"), (230, "repeat"), (260, "resolve")]
    assert incidents == {}


def test_pending_condition_that_clears_sends_nothing() -> None:
    """A condition gone before its grace ends is dropped silently."""
    rules = Rules(grace=30)
    incidents, alerts = evaluate({}, obs(sched(40)), rules)
    assert alerts == []
    assert "scheduler_dead" in incidents
    at = T0 + timedelta(seconds=20)
    incidents, alerts = evaluate(incidents, obs(sched(1, at=at), at=at), rules)
    assert alerts == []
    assert incidents == {}


def test_blind_observation_keeps_other_incidents() -> None:
    """While the source is down nothing else is opened or resolved; its own incident resolves after."""
    rules = Rules(grace=0)
    incidents, _ = evaluate({}, obs(sched(60)), rules)
    blind = Observation(at=T0 + timedelta(seconds=10), source="api", error="cannot reach")
    incidents, alerts = evaluate(incidents, blind, rules)
    assert sorted(incidents) == ["api_unreachable", "scheduler_dead"]
    at = T0 + timedelta(seconds=20)
    incidents, alerts = evaluate(incidents, obs(sched(0, at=at), at=at), rules)
    assert sorted(a.event for a in alerts) == ["resolve", "resolve"]
    assert incidents == {}


def test_metadatabase_unhealthy_is_its_own_alert() -> None:
    """An unhealthy metadatabase in the health body pages as such, not as a dead scheduler."""
    body = {
        "metadatabase": {"status": "unhealthy"},
        "scheduler": {"status": "unhealthy", "latest_scheduler_heartbeat": None},
    }
    found, seen = conditions(parse_health(body, T0), Rules())
    assert list(found) == ["metadatabase_unhealthy"]
    assert not seen


def test_canary_never_succeeded_waits_one_max_age() -> None:
    """A canary with no successful run yet only pages after canary_max_age (fresh deployments)."""
    rules = Rules(grace=0, canary_dag_id="c", canary_max_age=300)
    observation = obs(sched(1), canary_checked=True, canary_last_success=None)
    incidents, alerts = evaluate({}, observation, rules)
    assert alerts == []
    at = T0 + timedelta(seconds=300)
    later = obs(sched(1, at=at), at=at, canary_checked=True, canary_last_success=None)
    _, alerts = evaluate(incidents, later, rules)
    assert [a.summary for a in alerts] == ["Airflow scheduling stalled: canary 'c' has no recent success"]


def test_dedup_key_is_stable_for_an_incident() -> None:
    """Trigger, repeat and resolve of one incident carry one dedup key; a new incident gets another."""
    rules = Rules(grace=0, repeat_interval=10)
    incidents, first = evaluate({}, obs(sched(60)), rules)
    incidents, second = evaluate(incidents, obs(sched(70), at=T0 + timedelta(seconds=10)), rules)
    at = T0 + timedelta(seconds=20)
    _, third = evaluate(incidents, obs(sched(0, at=at), at=at), rules)
    _, fresh = evaluate({}, obs(sched(60), at=T0 + timedelta(seconds=30)), rules)
    assert first[0].dedup_key == second[0].dedup_key == third[0].dedup_key != fresh[0].dedup_key


def test_default_grace_pages_at_the_first_poll_past_the_threshold() -> None:
    """With default rules a dead scheduler pages at once: the 30 s threshold already is the grace."""
    rules = Rules()
    assert rules.grace == 0
    incidents, alerts = evaluate({}, obs(sched(31)), rules)
    assert [(a.event, a.severity) for a in alerts] == [("trigger", "critical")]
    assert incidents["scheduler_dead"].opened_at == T0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"expect_triggerer": "maybe"}, "expect_triggerer must be one of"),
        ({"grace": -1}, "grace and repeat_interval >= 0"),
        ({"canary_dag_id": "canary"}, "a canary DAG needs canary_max_age"),
    ],
)
def test_bad_rules_are_configuration_errors(kwargs: dict[str, object], message: str) -> None:
    """A wrong rule raises ConfigurationError, which old ``except ValueError`` callers still catch."""
    with pytest.raises(ConfigurationError, match=message) as err:
        Rules(**kwargs)  # type: ignore[arg-type]
    assert isinstance(err.value, ValueError)
