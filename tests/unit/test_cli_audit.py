"""`airflow-crashsafe duplicates` and `audit reconcile` argument handling, on an embedded store."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.effects import effect
from airflow_crashsafe.store import Store, attempts, open_store, reset_store_cache
from airflow_crashsafe.testing import fake_context
from tests.support.cli import printed_json, run_cli

PART = "2026-11-29T00:00:00+00:00"
RUN = f"scheduled__{PART}"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """The embedded SQLite store the CLI opens (no store connection), fresh for each test."""
    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "crashsafe.db"))
    reset_store_cache()
    yield open_store()
    reset_store_cache()


def _seed(store: Store, dag_id: str, task_id: str, *, overlap: bool) -> None:
    """Two tries of one slot through attempts.record: try 1 reset (no end hook), try 2 succeeds.

    With ``overlap`` try 1's beacons go on after try 2 started (a reset re-run while alive);
    without it try 1 failed and ended before try 2 (a plain retry).
    """
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=10)
    key: dict[str, Any] = {"dag_id": dag_id, "task_id": task_id, "map_index": -1, "run_id": RUN}
    start1 = {"started_at": t0, "last_seen_at": t0, "ti_id": "ti-1", "clear_number": 0}
    start2_at = t0 + timedelta(seconds=60)
    events = [
        AttemptEvent(
            source="listener", **key, try_number=1, hostname="w1", pid=11, slot_partition=PART, **start1
        )
    ]
    if overlap:
        beacon = t0 + timedelta(seconds=90)
        events.append(
            AttemptEvent(source="listener", **key, try_number=1, hostname="w1", pid=11, last_seen_at=beacon)
        )
    else:
        end1 = t0 + timedelta(seconds=30)
        events.append(
            AttemptEvent(
                source="listener",
                **key,
                try_number=1,
                hostname="w1",
                pid=11,
                ended_at=end1,
                reported_state="failed",
                last_seen_at=end1,
            )
        )
    end2 = start2_at + timedelta(seconds=30)
    events += [
        AttemptEvent(
            source="listener",
            **key,
            try_number=2,
            hostname="w1",
            pid=12,
            slot_partition=PART,
            ti_id="ti-2",
            clear_number=0,
            started_at=start2_at,
            last_seen_at=start2_at,
        ),
        AttemptEvent(
            source="listener",
            **key,
            try_number=2,
            hostname="w1",
            pid=12,
            ended_at=end2,
            reported_state="success",
            last_seen_at=end2,
        ),
    ]
    with store.transaction() as db:
        for event in events:
            attempts.record(db, event)


def _rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The duplicates table's rows by (dag, task)."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["dag", "task"])
    return {(r.split()[0], r.split()[1]): r.split() for r in lines[header + 1 :] if r.strip()}


def test_no_duplicates_exits_0(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """With no re-run slot, `duplicates` says so and exits 0."""
    code, out, _ = run_cli(capsys, "duplicates", "--since", "2h")
    assert code == 0
    assert out.splitlines()[-1].startswith("no duplicate executions in the last ")


def test_overlapping_rerun_is_critical_and_exits_1(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """An unprotected slot re-run while its first try was alive is listed as critical; exit 1."""
    _seed(store, "billing", "charge", overlap=True)
    code, out, _ = run_cli(capsys, "duplicates")
    assert code == 1
    row = _rows(out)[("billing", "charge")]
    assert row[2:] == [PART, "2", "overlap+reset_rerun", "30.0s", "unprotected", "critical"]


def test_plain_retry_is_low_risk_and_exits_0(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """A retry after a failure is listed with low risk and does not fail the command."""
    _seed(store, "billing", "charge", overlap=False)
    code, out, _ = run_cli(capsys, "duplicates")
    assert code == 0
    row = _rows(out)[("billing", "charge")]
    assert row[4:] == ["retry_after_failure", "-", "unprotected", "low"]


def test_ledgered_slot_is_not_risky(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """A re-run slot with idempotency-ledger entries counts as ledgered, risk none; exit 0."""
    _seed(store, "billing", "charge", overlap=True)
    with effect("payments", context=fake_context(dag_id="billing", task_id="charge")) as fx:
        fx.done({"id": "ch_1"})
    code, out, _ = run_cli(capsys, "duplicates")
    assert code == 0
    assert _rows(out)[("billing", "charge")][-2:] == ["ledgered", "none"]


def test_json_lists_reports_with_executions(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`duplicates --json` prints each slot's kinds, overlap, risk and its executions."""
    _seed(store, "billing", "charge", overlap=True)
    code, out, _ = run_cli(capsys, "duplicates", "--json")
    assert code == 1
    (report,) = printed_json(out)
    assert report["dag_id"] == "billing"
    assert report["partition"] == PART
    assert report["kinds"] == ["overlap", "reset_rerun"]
    assert report["overlap_seconds"] == 30.0
    assert report["risk"] == "critical"
    assert [(e["try_number"], e["pid"]) for e in report["executions"]] == [(1, 11), (2, 12)]
    assert report["executions"][1]["state"] == "success"


def test_dag_filter(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`duplicates --dag ID` lists only that DAG's slots (and exits by their risk alone)."""
    _seed(store, "billing", "charge", overlap=True)
    _seed(store, "emails", "welcome", overlap=False)
    code, out, _ = run_cli(capsys, "duplicates", "--dag", "emails")
    assert code == 0
    assert set(_rows(out)) == {("emails", "welcome")}


def test_since_excludes_slots_quiet_for_longer(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`duplicates --since 1h` leaves out slots whose records were last updated before that."""
    _seed(store, "billing", "charge", overlap=True)
    old = (datetime.now(timezone.utc) - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with store.transaction() as db:
        db.execute("UPDATE crashsafe_attempts SET updated_at = %(at)s", {"at": old})
    code, out, _ = run_cli(capsys, "duplicates", "--since", "1h")
    assert code == 0
    assert "billing" not in out
    code, out, _ = run_cli(capsys, "duplicates", "--since", "4h")
    assert code == 1
    assert ("billing", "charge") in _rows(out)


def test_bad_since_is_a_usage_error(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`duplicates --since` with something that is not a duration exits 2 and says the format."""
    code, _, err = run_cli(capsys, "duplicates", "--since", "yesterday")
    assert code == 2
    assert "expected a duration like 30m, 24h or 7d" in err


@pytest.mark.parametrize("since", ["99999999999d", "999999999d"])
def test_since_beyond_the_calendar_is_a_usage_error(
    store: Store, capsys: pytest.CaptureFixture[str], since: str
) -> None:
    """`duplicates --since` longer than the calendar allows exits 2 with one line naming the limit."""
    code, _, err = run_cli(capsys, "duplicates", "--since", since)
    assert code == 2
    last = err.splitlines()[-1]  # argparse's usage, then the one line of the error
    assert last.endswith(f"argument --since: {since!r} is too long: give at most 36500d"), err
    assert "Traceback" not in err


def test_reconcile_user_needs_password_env(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """`audit reconcile --api-user U` without --api-password-env exits 2 with one line."""
    code, _, err = run_cli(capsys, "audit", "reconcile", "--api-user", "admin")
    assert code == 2
    assert err == (
        "airflow-crashsafe: error: --api-user needs --api-password-env VAR (the password is never a flag)\n"
    )


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--api-token-env"], id="token"),
        pytest.param(["--api-user", "admin", "--api-password-env"], id="password"),
    ],
)
def test_reconcile_unset_secret_env_is_an_error(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """A secret read from an unset environment variable exits 2 naming the variable."""
    monkeypatch.delenv("CRASHSAFE_TEST_UNSET_SECRET", raising=False)
    code, _, err = run_cli(capsys, "audit", "reconcile", *flags, "CRASHSAFE_TEST_UNSET_SECRET")
    assert code == 2
    assert err == (
        "airflow-crashsafe: error: environment variable CRASHSAFE_TEST_UNSET_SECRET is not set: export it\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["audit"], "AUDIT_COMMAND", id="no-subcommand"),
        pytest.param(["audit", "reconcile", "--grace", "soon"], "expected a duration", id="bad-grace"),
        pytest.param(
            ["audit", "reconcile", "--timeout", "x"], "--timeout: 'x' is not a number", id="bad-timeout"
        ),
        pytest.param(
            ["audit", "reconcile", "--timeout", "nan"], "--timeout: 'nan' is not a finite", id="nan-timeout"
        ),
    ],
)
def test_reconcile_usage_errors(
    store: Store, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Malformed `audit` arguments exit 2 with argparse's message, before anything is contacted."""
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert message in err


def test_reconcile_fills_ends_and_brings_the_duplicate_digest_up_to_date(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """`audit reconcile` reads the tries from the api-server, then the UI's digest holds the slot."""
    from airflow_crashsafe.audit import digest
    from airflow_crashsafe.store.duplicates import DuplicateFilter
    from tests.support.httpserver import Recorded, Reply, serve

    _seed(store, "nightly", "load", overlap=True)
    [open_try] = [r for r in _attempt_rows(store) if r["ended_at"] is None]

    def tries(request: Recorded) -> Reply:
        assert request.path.startswith("/api/v2/dags/nightly/dagRuns/")
        history = {
            "try_number": 1,
            "state": "failed",
            "hostname": "w1",
            "pid": 11,
            "start_date": open_try["started_at"].isoformat(),
            "end_date": (open_try["started_at"] + timedelta(seconds=60)).isoformat(),
        }
        return Reply(body={"task_instances": [history], "total_entries": 1})

    with serve(tries) as server:
        code, out, _ = run_cli(capsys, "audit", "reconcile", "--api-url", server.url, "--grace", "1s")
    assert code == 0, out
    assert "1 ends filled" in out
    assert "duplicate digest: 1 task instances reclassified" in out
    assert digest.refresh(store).task_instances == 0
    ever = DuplicateFilter(("nightly",), since=datetime(2000, 1, 1, tzinfo=timezone.utc))
    _, [slot] = digest.duplicates(store, ever)
    assert slot.kinds == ("overlap", "reset_rerun")
    assert slot.executions[0].end_source == "reconcile"
    assert slot.executions[0].ended_at == open_try["last_seen_at"]  # the beacon, not the archive time


def _attempt_rows(store: Store) -> list[dict[str, Any]]:
    with store.transaction() as db:
        return attempts.slot_rows(db, since=datetime(2000, 1, 1, tzinfo=timezone.utc))
