"""[[deadlines]] entries: validation, time zones, DST edges, cron + offset and the watched run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.watchdog.deadline_rules import watched_run
from airflow_crashsafe.watchdog.deadlines import Deadline, parse_deadlines
from airflow_crashsafe.watchdog.runs import RunView

UTC = timezone.utc


def one(**spec: Any) -> Deadline:
    return parse_deadlines([{"dag_id": "nightly", **spec}])[0]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_time_of_day_in_its_zone() -> None:
    """06:00 Europe/Berlin in winter is 05:00 UTC; the window runs from the previous 06:00."""
    deadline = one(at="06:00", timezone="Europe/Berlin")
    [occ] = [o for o in deadline.occurrences(utc(2026, 1, 15, 4, 0), 3600) if o.at > utc(2026, 1, 15, 4, 0)]
    assert occ.at == utc(2026, 1, 15, 5, 0)
    assert occ.due_from == utc(2026, 1, 14, 5, 0)


def test_spring_gap_fires_at_the_instant_it_would_have_been() -> None:
    """02:30 does not exist on 29 March 2026 in Berlin: the deadline is 03:30 summer time (01:30 UTC)."""
    deadline = one(at="02:30", timezone="Europe/Berlin")
    ats = [o.at for o in deadline.occurrences(utc(2026, 3, 29, 12, 0), 2 * 86400)]
    assert utc(2026, 3, 29, 1, 30) in ats
    assert utc(2026, 3, 28, 1, 30) in ats  # the day before: 02:30 winter time


def test_autumn_repeated_hour_takes_the_first() -> None:
    """02:30 happens twice on 25 October 2026 in Berlin: the deadline is the first (00:30 UTC)."""
    deadline = one(at="02:30", timezone="Europe/Berlin")
    ats = [o.at for o in deadline.occurrences(utc(2026, 10, 25, 12, 0), 86400)]
    assert ats[0] == utc(2026, 10, 25, 0, 30)
    assert ats[1] - ats[0] == timedelta(hours=25)  # the day is 25 hours long


def test_cron_plus_offset() -> None:
    """A run due at each cron time must be done ``offset`` later; its window ends at the next cron time."""
    deadline = one(cron="0 0 * * *", offset="6h", timezone="Europe/Berlin")
    [occ] = deadline.occurrences(utc(2026, 1, 15, 3, 0), 3600)
    assert (occ.due_from, occ.at, occ.due_before) == (
        utc(2026, 1, 14, 23, 0),
        utc(2026, 1, 15, 5, 0),
        utc(2026, 1, 15, 23, 0),
    )


def test_past_occurrences_are_kept_for_keep_seconds() -> None:
    """A deadline more than ``keep`` seconds past is no longer watched."""
    deadline = one(at="06:00")
    assert [o.at for o in deadline.occurrences(utc(2026, 1, 15, 7, 0), 7200)] == [
        utc(2026, 1, 15, 6, 0),
        utc(2026, 1, 16, 6, 0),
    ]
    assert [o.at for o in deadline.occurrences(utc(2026, 1, 15, 9, 0), 7200)] == [utc(2026, 1, 16, 6, 0)]


def run(run_id: str, after: datetime, run_type: str = "scheduled", state: str = "running") -> RunView:
    return RunView(run_id, run_type, state, after)


def test_watched_run_is_the_newest_due_in_the_window() -> None:
    """The newest allowed run due in [previous deadline, deadline); manual and later runs do not count."""
    deadline = one(at="06:00")
    occ = next(
        o for o in deadline.occurrences(utc(2026, 1, 15, 5, 0), 3600) if o.at == utc(2026, 1, 15, 6, 0)
    )
    runs = [
        run("yesterday", utc(2026, 1, 14, 0, 0)),
        run("today", utc(2026, 1, 15, 0, 0)),
        run("manual", utc(2026, 1, 15, 1, 0), run_type="manual"),
        run("after", utc(2026, 1, 15, 6, 0)),
    ]
    found = watched_run(runs, deadline, occ)
    assert found is not None
    assert found.run_id == "today"
    assert watched_run(runs[:1], deadline, occ) is None


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({}, "exactly one of 'at'"),
        ({"at": "6 o'clock"}, "'at' must be a local time"),
        ({"at": "06:00", "timezone": "Mars/Olympus"}, "'timezone'"),
        ({"cron": "0 0 * * *"}, "'cron' needs 'offset'"),
        ({"cron": "every night", "offset": "6h"}, "not a valid cron"),
        ({"cron": "0 0 * * *", "offset": "six hours"}, "'offset' must be like"),
        ({"at": "06:00", "offset": "1h"}, "'offset' goes with 'cron'"),
        ({"at": "06:00", "severity": "urgent"}, "'severity'"),
        ({"at": "06:00", "run_types": "scheduled"}, "'run_types'"),
        ({"at": "06:00", "colour": "red"}, "unknown field"),
    ],
)
def test_bad_entries_name_the_entry_and_field(spec: dict[str, Any], needle: str) -> None:
    """Each mistake is a ConfigurationError naming the entry, its DAG and the field."""
    with pytest.raises(ConfigurationError, match="entry 1 \\(dag_id 'nightly'\\)") as caught:
        parse_deadlines([{"dag_id": "nightly", **spec}])
    assert needle in str(caught.value)


@pytest.mark.parametrize("offset", [float("nan"), float("inf"), -60, 10**12, "99999999d"])
def test_an_offset_that_is_not_a_finite_number_of_seconds_in_range_is_refused(offset: object) -> None:
    """`offset = inf` used to crash on a timedelta overflow, nan fell through: both are refused by
    name, as is an offset past a year (its window would never close), with the file named."""
    with pytest.raises(ConfigurationError) as caught:
        parse_deadlines([{"dag_id": "nightly", "cron": "0 0 * * *", "offset": offset}], "/etc/watch.toml")
    message = str(caught.value)
    assert message.startswith("/etc/watch.toml: [[deadlines]] entry 1 (dag_id 'nightly'): 'offset'")
    assert "set it to a number of seconds from 0 to 31536000" in message
    assert one(cron="0 0 * * *", offset=86400.0).offset == timedelta(days=1)


def test_missing_dag_id_and_duplicate_names() -> None:
    """No dag_id, or one name used twice, is a ConfigurationError saying what to do."""
    with pytest.raises(ConfigurationError, match="'dag_id' is required"):
        parse_deadlines([{"at": "06:00"}])
    with pytest.raises(ConfigurationError, match="used twice"):
        parse_deadlines([{"dag_id": "a", "at": "06:00"}, {"dag_id": "a", "at": "06:00"}])
    with pytest.raises(ConfigurationError, match=r"\[\[deadlines\]\]"):
        parse_deadlines({"dag_id": "a"})
