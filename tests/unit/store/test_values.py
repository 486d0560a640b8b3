"""How the audit's tables store times and booleans on SQLite, and read them back."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow_crashsafe.store.dbapi import connect_url
from airflow_crashsafe.store.values import in_list, stamp_from_db, stamps_from_db, to_db


def test_sqlite_times_are_sortable_utc_text_and_read_back_aware(tmp_path: Path) -> None:
    """A time in any zone is stored as UTC text with a Z; reading gives the same instant, aware."""
    db = connect_url(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        at = datetime(2026, 1, 1, 2, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
        stored = to_db(db, at)
        assert stored == "2026-01-01T00:30:00.123456Z"
        assert stamp_from_db(stored) == at
        assert stamp_from_db(stored).tzinfo is not None
        assert (to_db(db, True), to_db(db, "x"), to_db(db, None)) == (1, "x", None)
    finally:
        db.close()


def test_naive_times_are_utc_and_other_columns_pass_untouched() -> None:
    """A naive time read from a driver is UTC; only the named columns are read as times."""
    row = stamps_from_db({"started_at": datetime(2026, 1, 1), "state": "2026"}, ["started_at", "ended_at"])
    assert row == {"started_at": datetime(2026, 1, 1, tzinfo=timezone.utc), "state": "2026", "ended_at": None}


def test_in_list_names_one_parameter_per_value() -> None:
    """An IN list's placeholders and parameters, named after the prefix and position."""
    assert in_list("a", ["x", "y"]) == ("%(a0)s, %(a1)s", {"a0": "x", "a1": "y"})
    assert in_list("a", []) == ("", {})
