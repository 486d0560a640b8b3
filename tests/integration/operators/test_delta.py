"""Delta Lake writes fenced by the table's own transaction protocol, on local filesystem tables."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_crashsafe.errors import FencedOut
from airflow_crashsafe.fencing.delta import delta_app_id
from airflow_crashsafe.identity import slot_from_context
from airflow_crashsafe.operators.delta import DeltaMergeOperator, DeltaPartitionOverwriteOperator
from airflow_crashsafe.testing.context import fake_context

pytestmark = pytest.mark.integration

deltalake = pytest.importorskip("deltalake")
arro3 = pytest.importorskip("arro3.core")

DAY = "2024-01-02"


def _rows(day: list[str], region: list[str], amount: list[int]) -> Any:
    text, number = arro3.DataType.string(), arro3.DataType.int64()
    return arro3.Table.from_pydict(
        {
            "day": arro3.Array(day, type=text),
            "region": arro3.Array(region, type=text),
            "amount": arro3.Array(amount, type=number),
        }
    )


def _table(tmp_path: Path) -> str:
    uri = str(tmp_path / "revenue")
    deltalake.write_deltalake(uri, _rows(["2024-01-01", DAY], ["eu", "eu"], [1, 999]), partition_by=["day"])
    return uri


def _contents(uri: str) -> list[tuple[Any, ...]]:
    table = deltalake.DeltaTable(uri)
    batches = deltalake.QueryBuilder().register("t", table).execute("SELECT day, region, amount FROM t")
    data = arro3.Table.from_batches(list(batches)) if not hasattr(batches, "read_all") else batches.read_all()
    columns = [data.column(name).to_pylist() for name in ("day", "region", "amount")]
    return sorted(zip(*columns, strict=True))


def _overwrite(
    uri: str, amount: int, before: Callable[[], None] | None = None
) -> DeltaPartitionOverwriteOperator:
    def source(context: Any) -> Any:
        if before is not None:
            before()  # what happens between this attempt's check and its commit
        return _rows([DAY, DAY], ["eu", "us"], [amount, amount + 1])

    return DeltaPartitionOverwriteOperator(
        task_id="load", table_uri=uri, partition={"day": DAY}, source=source, partition_by=["day"]
    )


def _fenced_commits(uri: str) -> list[dict[str, Any]]:
    return [h for h in deltalake.DeltaTable(uri).history() if "crashsafe_attempt" in h]


def test_older_attempt_committing_last_is_refused(tmp_path: Path) -> None:
    """Try 1 starts, try 2 commits, try 1 commits last: refused; try 2's rows stand."""
    uri = _table(tmp_path)
    newer = _overwrite(uri, 20)
    zombie_ctx, newer_ctx = (
        fake_context(task_id="load", try_number=1),
        fake_context(task_id="load", try_number=2),
    )
    zombie = _overwrite(uri, 10, before=lambda: newer.execute(newer_ctx))
    with pytest.raises(FencedOut, match="fenced out at commit") as err:
        zombie.execute(zombie_ctx)
    assert err.value.newest_token is not None
    assert err.value.token is not None
    assert err.value.newest_token > err.value.token
    assert _contents(uri) == [("2024-01-01", "eu", 1), (DAY, "eu", 20), (DAY, "us", 21)]
    assert len(_fenced_commits(uri)) == 1


def test_older_attempt_committing_after_a_newer_one_started_is_refused_by_the_token(tmp_path: Path) -> None:
    """Try 1 starts, try 2 starts (takes its token), try 1 commits: refused; try 2 then commits alone."""
    uri = _table(tmp_path)
    newer_started, newer_may_commit = threading.Event(), threading.Event()
    results: list[dict[str, Any] | BaseException] = []

    def newer_source_waits() -> None:
        newer_started.set()  # the source runs after the attempt took its token
        assert newer_may_commit.wait(30)

    newer = _overwrite(uri, 20, before=newer_source_waits)

    def run_newer() -> None:
        try:
            results.append(newer.execute(fake_context(task_id="load", try_number=2)))
        except BaseException as exc:  # reported by the assertion below
            results.append(exc)

    thread = threading.Thread(target=run_newer)

    def newer_starts() -> None:
        thread.start()
        assert newer_started.wait(30)

    zombie = _overwrite(uri, 10, before=newer_starts)
    try:
        with pytest.raises(FencedOut, match="fenced out at commit: try 2") as err:
            zombie.execute(fake_context(task_id="load", try_number=1))
    finally:
        newer_may_commit.set()
        thread.join(30)
    assert err.value.token is not None
    assert err.value.newest_token is not None
    assert err.value.newest_token > err.value.token
    assert len(results) == 1
    assert isinstance(results[0], dict), results
    assert (results[0]["skipped"], results[0]["fence_token"]) == (False, err.value.newest_token)
    assert _contents(uri) == [("2024-01-01", "eu", 1), (DAY, "eu", 20), (DAY, "us", 21)]
    commits = _fenced_commits(uri)
    assert len(commits) == 1
    assert "try 2" in commits[0]["crashsafe_attempt"]


def test_an_older_attempt_starting_after_the_newer_commit_is_refused_at_start(tmp_path: Path) -> None:
    """A zombie that reaches the table after try 2 committed is refused before it writes anything."""
    uri = _table(tmp_path)
    _overwrite(uri, 20).execute(fake_context(task_id="load", try_number=2))
    called: list[bool] = []
    zombie = _overwrite(uri, 10, before=lambda: called.append(True))
    with pytest.raises(FencedOut, match="fenced out at start"):
        zombie.execute(fake_context(task_id="load", try_number=1))
    assert called == []
    assert _contents(uri)[1:] == [(DAY, "eu", 20), (DAY, "us", 21)]


def test_a_retry_after_commit_skips_and_history_shows_one_commit_per_slot(tmp_path: Path) -> None:
    """Try 2 of a committed slot reads the table's txn state and writes nothing; one commit per slot."""
    uri = _table(tmp_path)
    first = _overwrite(uri, 20).execute(fake_context(task_id="load", try_number=1))
    assert first["skipped"] is False
    ran: list[bool] = []
    retry = _overwrite(uri, 30, before=lambda: ran.append(True)).execute(
        fake_context(task_id="load", try_number=2)
    )
    assert (retry["skipped"], ran) == (True, [])
    assert "try 1" in retry["committed_by"]
    other_day = fake_context(task_id="load", logical_date=None, run_id="manual_other")
    _overwrite(uri, 40).execute(other_day)  # another slot: its own commit
    commits = _fenced_commits(uri)
    assert len(commits) == 2
    slot = slot_from_context(fake_context(task_id="load"))
    assert deltalake.DeltaTable(uri).transaction_version(delta_app_id(slot, uri)) == first["token"]


def test_a_cleared_run_writes_again(tmp_path: Path) -> None:
    """After a clear the slot runs again, and its commit replaces the partition."""
    uri = _table(tmp_path)
    _overwrite(uri, 20).execute(fake_context(task_id="load", try_number=1))
    again = _overwrite(uri, 50).execute(fake_context(task_id="load", try_number=2, clear_number=1))
    assert again["skipped"] is False
    assert _contents(uri)[1:] == [(DAY, "eu", 50), (DAY, "us", 51)]


def test_merge_upserts_once_per_slot_and_a_cleared_rerun_does_not_double_count(tmp_path: Path) -> None:
    """DeltaMergeOperator updates matched keys and inserts new ones; re-runs leave the same rows."""
    uri = _table(tmp_path)

    def merge(context: dict[str, Any]) -> dict[str, Any]:
        op = DeltaMergeOperator(
            task_id="merge",
            table_uri=uri,
            natural_key=["day", "region"],
            source=lambda ctx: _rows([DAY, DAY], ["eu", "us"], [7, 8]),
        )
        return op.execute(context)

    assert merge(fake_context(task_id="merge"))["skipped"] is False
    expected = [("2024-01-01", "eu", 1), (DAY, "eu", 7), (DAY, "us", 8)]
    assert _contents(uri) == expected
    assert merge(fake_context(task_id="merge", try_number=2))["skipped"] is True
    assert merge(fake_context(task_id="merge", try_number=3, clear_number=1))["skipped"] is False
    assert _contents(uri) == expected
