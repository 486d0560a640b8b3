"""Slots and attempts derived from a task context of plain objects (decisions 2 and 3)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pendulum
import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.identity import attempt_from_context, slot_from_context
from tests.support.fencing import make_context


def test_partition_is_logical_date_in_iso_utc() -> None:
    """A run with a logical date maps to the slot partition of that date, ISO 8601 in UTC."""
    paris = timezone(timedelta(hours=1))
    ctx = make_context(logical_date=datetime(2024, 3, 1, 0, 30, tzinfo=paris))
    assert slot_from_context(ctx).partition == "2024-02-29T23:30:00+00:00"


def test_pendulum_logical_date_is_normalised_to_utc() -> None:
    """Airflow's pendulum datetimes give the same partition as the equivalent UTC datetime."""
    ctx = make_context(logical_date=pendulum.datetime(2024, 1, 2, 1, tz="Europe/Paris"))
    assert slot_from_context(ctx).partition == "2024-01-02T00:00:00+00:00"


def test_naive_logical_date_is_taken_as_utc() -> None:
    """A naive logical date is read as UTC, not as local time."""
    ctx = make_context(logical_date=datetime(2024, 1, 2))
    assert slot_from_context(ctx).partition == "2024-01-02T00:00:00+00:00"


def test_partition_falls_back_to_run_id_without_logical_date() -> None:
    """A run without a logical date (asset-triggered, manual in 3.x) is partitioned by run_id."""
    ctx = make_context(logical_date=None, run_id="manual__2024-05-01T10:00:00")
    assert slot_from_context(ctx).partition == "manual__2024-05-01T10:00:00"


def test_explicit_partition_overrides_the_derived_one() -> None:
    """An explicit partition wins over the logical date; an empty one falls back to it."""
    ctx = make_context()
    assert slot_from_context(ctx, "region=eu").partition == "region=eu"
    assert slot_from_context(ctx, "").partition == "2024-01-02T00:00:00+00:00"


@pytest.mark.parametrize(("map_index", "expected"), [(None, -1), (-1, -1), (0, 0), (7, 7)])
def test_map_index_none_means_unmapped(map_index: int | None, expected: int) -> None:
    """map_index None (and -1) is the unmapped slot -1; a mapped index is kept."""
    assert slot_from_context(make_context(map_index=map_index)).map_index == expected


def test_same_date_different_runs_share_a_slot() -> None:
    """A backfill and a manual run of the same logical date are the same slot."""
    scheduled = make_context(run_id="scheduled__2024-01-02", try_number=1)
    backfill = make_context(run_id="backfill__2024-01-02", try_number=4)
    assert slot_from_context(scheduled) == slot_from_context(backfill)


def test_attempt_reads_try_ti_id_run_and_clear_number() -> None:
    """The attempt carries try_number, ti.id, run_id and clear_number from the context."""
    attempt = attempt_from_context(make_context(try_number=3, ti_id="ti-9", clear_number=2))
    assert (attempt.try_number, attempt.ti_id, attempt.run_id, attempt.clear_number) == (
        3,
        "ti-9",
        "scheduled__2024-01-02",
        2,
    )


def test_missing_clear_number_means_generation_zero() -> None:
    """A dag_run without clear_number (older Airflow objects) is clear generation 0."""
    ctx = make_context()
    ctx["dag_run"].clear_number = None
    assert attempt_from_context(ctx).clear_number == 0


def test_context_without_ti_is_a_configuration_error() -> None:
    """A context lacking 'ti' raises ConfigurationError naming what is missing."""
    with pytest.raises(ConfigurationError, match="no 'ti'"):
        slot_from_context({"dag_run": object()})
