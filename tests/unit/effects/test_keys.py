"""Idempotency keys: stable for one slot and target, different for anything else."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_crashsafe.effects.keys import idempotency_key
from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.macros import idempotency_key as idempotency_key_macro
from airflow_crashsafe.testing import fake_context

dates = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
)
targets = st.text(min_size=1, max_size=40)
map_indexes = st.integers(min_value=-1, max_value=10_000)


@settings(max_examples=200, deadline=None)
@given(
    date=dates,
    target=targets,
    map_index=map_indexes,
    tries=st.tuples(st.integers(1, 50), st.integers(1, 50)),
    clears=st.tuples(st.integers(0, 5), st.integers(0, 5)),
)
def test_same_slot_same_key_across_tries_clears_and_backfills(date, target, map_index, tries, clears) -> None:
    """Retries, resets, clears and a backfill of the same date (other run id) share one key."""
    scheduled = fake_context(
        logical_date=date,
        map_index=map_index,
        try_number=tries[0],
        clear_number=clears[0],
        run_id=f"scheduled__{date.isoformat()}",
    )
    backfill = fake_context(
        logical_date=date,
        map_index=map_index,
        try_number=tries[1],
        clear_number=clears[1],
        run_id=f"backfill__{date.isoformat()}",
    )
    key = idempotency_key(target, context=scheduled)
    assert key == idempotency_key(target, context=backfill)
    assert uuid.UUID(key).version == 5


@settings(max_examples=200, deadline=None)
@given(
    date=dates,
    delta=st.integers(min_value=1, max_value=10**6),
    target=targets,
    other=targets,
    map_index=map_indexes,
)
def test_keys_differ_across_dates_targets_map_indexes_and_versions(
    date, delta, target, other, map_index
) -> None:
    """A different date, target, map index or version never shares a key."""
    base = fake_context(logical_date=date, map_index=map_index)
    key = idempotency_key(target, context=base)
    later = fake_context(logical_date=date + timedelta(seconds=delta), map_index=map_index)
    assert key != idempotency_key(target, context=later)
    assert key != idempotency_key(target, context=fake_context(logical_date=date, map_index=map_index + 1))
    assert key != idempotency_key(target, context=base, version=2)
    if other != target:
        assert key != idempotency_key(other, context=base)


def test_run_without_logical_date_keys_on_run_id() -> None:
    """A run with no logical date is keyed by its run id, so two such runs differ."""
    first = fake_context(logical_date=None, run_id="manual__a")
    second = fake_context(logical_date=None, run_id="manual__b")
    assert idempotency_key("t", context=first) != idempotency_key("t", context=second)
    assert idempotency_key("t", context=first) == idempotency_key(
        "t", context=fake_context(logical_date=None, run_id="manual__a", try_number=4)
    )


def test_naive_and_aware_logical_dates_agree() -> None:
    """A naive logical date is read as UTC, the same instant as the aware one."""
    aware = fake_context(logical_date=datetime(2026, 11, 29, tzinfo=timezone.utc))
    naive = fake_context(logical_date=datetime(2026, 11, 29))
    assert idempotency_key("t", context=aware) == idempotency_key("t", context=naive)


@pytest.mark.parametrize("bad", [0, -1, True, "2"])
def test_bad_version_is_refused(bad: object) -> None:
    """A version that is not a positive integer is a configuration error."""
    with pytest.raises(ConfigurationError, match="version"):
        idempotency_key("t", context=fake_context(), version=bad)  # type: ignore[arg-type]


def test_empty_target_is_refused() -> None:
    """An empty target is refused with a message naming the fix."""
    with pytest.raises(ConfigurationError, match="non-empty target"):
        idempotency_key("", context=fake_context())


def test_macro_renders_the_key_from_the_template_context() -> None:
    """``{{ macros.crashsafe.idempotency_key('payouts') }}`` renders the task's key in Jinja."""
    import jinja2

    context = fake_context()
    env = jinja2.Environment()
    template = env.from_string("{{ macros.crashsafe.idempotency_key('payouts') }}")
    from types import SimpleNamespace

    macros = SimpleNamespace(crashsafe=SimpleNamespace(idempotency_key=idempotency_key_macro))
    rendered = template.render(macros=macros, **context)
    assert rendered == idempotency_key("payouts", context=context)
