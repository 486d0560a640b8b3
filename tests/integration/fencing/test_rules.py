"""The fencing rules one scenario at a time: zombies, redelivery, committed means done, clears."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from airflow_crashsafe import config
from airflow_crashsafe.errors import CrashsafeError, FencedOut
from airflow_crashsafe.identity import slot_from_context
from airflow_crashsafe.store.dbapi import Db, connect_url
from airflow_crashsafe.store.fences import FenceState
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing.metrics import record_metrics
from tests.support.engines import CONCURRENT_WRITERS, SERIAL_WRITERS
from tests.support.fencing import (
    OUTPUT_TABLE,
    AttemptSpec,
    attempt_ctx,
    create_output_table,
    output_rows,
    read_fence_url,
)
from tests.support.stepping import SteppedAttempt

pytestmark = pytest.mark.integration

Spawn = Callable[..., SteppedAttempt]


@pytest.fixture
def dag_id() -> str:
    return f"rules_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def attempt(target_url: str, store: Store, dag_id: str) -> Iterator[Spawn]:
    """Factory of stepped attempts of one slot, each on its own connection (closed afterwards)."""
    setup = connect_url(target_url)
    create_output_table(setup)
    setup.close()
    opened: list[Db] = []

    def spawn(name: str, try_number: int, clear_number: int = 0, rows: int = 3) -> SteppedAttempt:
        db = connect_url(target_url)
        opened.append(db)
        spec = AttemptSpec(name, try_number, clear_number, dag_id=dag_id, rows=rows)
        return SteppedAttempt(db, store, spec)

    yield spawn
    for db in opened:
        db.close()


def _fence(url: str, dag_id: str) -> FenceState:
    slot = slot_from_context(attempt_ctx(AttemptSpec("x", 1, dag_id=dag_id)))
    fence = read_fence_url(url, slot, OUTPUT_TABLE)
    assert fence is not None
    return fence


def _rows(url: str) -> list[tuple[str, int, int | None]]:
    db = connect_url(url)
    try:
        slot = slot_from_context(attempt_ctx(AttemptSpec("x", 1)))
        return output_rows(db, slot.partition)
    finally:
        db.close()


@pytest.mark.parametrize("target_url", CONCURRENT_WRITERS, indirect=True)  # SQLite: the serial test
def test_zombie_writing_after_newer_commit_is_fenced_out(
    attempt: Spawn, target_url: str, store: Store, dag_id: str
) -> None:
    """A zombie that writes after the newer try committed gets FencedOut; its rows never show."""
    zombie, retry = attempt("zombie", 1), attempt("retry", 2)
    zombie.begin()
    retry.begin()
    retry.write()
    retry.exit()
    zombie.write()
    zombie.exit()
    assert (retry.outcome, zombie.outcome) == ("committed", "fenced_commit")
    assert zombie.error is not None
    assert zombie.error.newest_token == retry.token
    assert "Stale attempt try 1" in str(zombie.error)
    assert _rows(target_url) == [("retry", 2, retry.token)] * 3
    fence = _fence(target_url, dag_id)
    assert fence.rejected_count == 1
    assert fence.committed is not None
    assert fence.committed.ti_id == "retry"
    events = store.events(dag_id=dag_id, kinds=["fenced_out"])
    assert [(e["ti_id"], e["try_number"], e["detail"]["stage"]) for e in events] == [("zombie", 1, "commit")]
    assert events[0]["detail"]["newest_try"] == 2


@pytest.mark.parametrize("target_url", CONCURRENT_WRITERS, indirect=True)  # SQLite: the serial test
def test_zombie_starting_after_newer_try_is_fenced_at_start(
    attempt: Spawn, target_url: str, store: Store, dag_id: str
) -> None:
    """An older try that only starts once a newer try holds the slot is refused before its body runs."""
    retry, zombie = attempt("retry", 2), attempt("zombie", 1)
    retry.begin()
    zombie.begin()
    assert zombie.outcome == "fenced_start"
    assert zombie.error is not None
    assert zombie.error.token is None
    retry.write()
    retry.exit()
    assert retry.outcome == "committed"
    assert _fence(target_url, dag_id).rejected_count == 1
    assert [e["detail"]["stage"] for e in store.events(dag_id=dag_id, kinds=["fenced_out"])] == ["start"]


@pytest.mark.parametrize("target_url", CONCURRENT_WRITERS, indirect=True)  # SQLite: the serial test
def test_same_try_started_twice_later_starter_wins(attempt: Spawn, target_url: str, dag_id: str) -> None:
    """Broker redelivery: of two processes running the same try, the later starter commits."""
    first, second = attempt("first", 1), attempt("second", 1)
    first.begin()
    second.begin()
    assert first.token is not None
    assert second.token is not None
    assert second.token > first.token
    first.write()
    first.exit()
    second.write()
    second.exit()
    assert (first.outcome, second.outcome) == ("fenced_commit", "committed")
    assert _rows(target_url) == [("second", 1, second.token)] * 3
    fence = _fence(target_url, dag_id)
    assert fence.committed is not None
    assert fence.committed.ti_id == "second"


def test_retry_after_commit_is_already_committed(
    attempt: Spawn, target_url: str, store: Store, dag_id: str
) -> None:
    """Try 2 after try 1 committed (same clear) does nothing and names try 1 as the committer."""
    first = attempt("first", 1)
    first.begin()
    first.write()
    first.exit()
    retry = attempt("retry", 2)
    retry.begin()
    assert retry.outcome == "already_committed"
    assert retry.tx is not None
    assert retry.tx.committed_by is not None
    assert (retry.tx.committed_by.try_number, retry.tx.committed_by.ti_id) == (1, "first")
    assert retry.tx.committed_by.token == first.token
    with pytest.raises(CrashsafeError, match="already committed"):
        _ = retry.tx.cursor
    retry.exit()
    assert _rows(target_url) == [("first", 1, first.token)] * 3
    skipped = store.events(dag_id=dag_id, kinds=["skipped_committed"])
    assert [(e["ti_id"], e["detail"]["committed_ti_id"]) for e in skipped] == [("retry", "first")]


def test_after_a_clear_a_new_try_runs_and_commits(attempt: Spawn, target_url: str, dag_id: str) -> None:
    """After a clear (clear_number + 1) the slot runs again and the new try's output replaces the old."""
    first = attempt("first", 1, clear_number=0)
    first.begin()
    first.write()
    first.exit()
    again = attempt("after-clear", 2, clear_number=1, rows=2)
    again.begin()
    assert again.outcome is None
    assert again.token is not None
    assert first.token is not None
    assert again.token > first.token
    again.write()
    again.exit()
    assert again.outcome == "committed"
    assert _rows(target_url) == [("after-clear", 2, again.token)] * 2
    fence = _fence(target_url, dag_id)
    assert fence.committed is not None
    assert (fence.committed.ti_id, fence.committed.clear_number) == ("after-clear", 1)
    late = attempt("late-zombie", 1, clear_number=0)
    late.begin()
    assert late.outcome == "fenced_start"


def test_body_exception_rolls_back_and_leaves_slot_open(attempt: Spawn, target_url: str) -> None:
    """A body that raises commits nothing, and the next try of the slot still runs."""
    dying = attempt("dying", 1)
    dying.begin()
    dying.write()
    dying.exit(fail=True)
    assert _rows(target_url) == []
    retry = attempt("retry", 2)
    retry.begin()
    retry.write()
    retry.exit()
    assert retry.outcome == "committed"
    assert _rows(target_url) == [("retry", 2, retry.token)] * 3


@pytest.mark.parametrize("target_url", ["postgresql"], indirect=True)  # interleaved: see the serial test
def test_store_outage_does_not_fail_a_committed_write(
    target_url: str, dag_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the store unreachable, the fenced write still commits and a warning is logged."""
    # Airflow's first import reconfigures logging and drops pytest's handler from the root logger.
    config.store_conn_id()
    logging.getLogger("airflow_crashsafe").addHandler(caplog.handler)
    unreachable = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=2"
    dead_store = Store(lambda: connect_url(unreachable), location=unreachable)
    setup = connect_url(target_url)
    create_output_table(setup)
    setup.close()
    zombie_db, writer_db = connect_url(target_url), connect_url(target_url)
    try:
        zombie = SteppedAttempt(zombie_db, dead_store, AttemptSpec("zombie", 1, dag_id=dag_id))
        writer = SteppedAttempt(writer_db, dead_store, AttemptSpec("writer", 2, dag_id=dag_id))
        with caplog.at_level(logging.WARNING, logger="airflow_crashsafe"):
            zombie.begin()
            writer.begin()
            writer.write()
            writer.exit()
            zombie.write()
            zombie.exit()  # the outage does not turn the fencing answer into a store error
        assert (writer.outcome, zombie.outcome) == ("committed", "fenced_commit")
        assert isinstance(zombie.error, FencedOut)
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("could not record committed event" in m for m in messages)
        assert any("could not record fenced_out event" in m for m in messages)
        assert _rows(target_url) == [("writer", 2, writer.token)]
    finally:
        logging.getLogger("airflow_crashsafe").removeHandler(caplog.handler)
        zombie_db.close()
        writer_db.close()


@pytest.mark.parametrize("target_url", SERIAL_WRITERS, indirect=True)
def test_sqlite_serialises_overlapping_attempts_so_the_zombie_never_overwrites(
    target_url: str, store: Store
) -> None:
    """On SQLite (and DuckDB) a newer attempt waits for an open body; it then finds the slot committed."""
    sqlite_url = target_url
    setup = connect_url(sqlite_url)
    create_output_table(setup)
    setup.close()
    zombie_db, retry_db = connect_url(sqlite_url), connect_url(sqlite_url)
    zombie = SteppedAttempt(zombie_db, store, AttemptSpec("zombie", 1))
    retry = SteppedAttempt(retry_db, store, AttemptSpec("retry", 2))
    try:
        zombie.begin()
        zombie.write()
        waiting = threading.Thread(target=retry.begin)
        waiting.start()
        waiting.join(timeout=0.5)
        assert waiting.is_alive(), "the retry must wait for the zombie's write lock"
        zombie.exit()
        waiting.join(timeout=30)
        assert (zombie.outcome, retry.outcome) == ("committed", "already_committed")
        assert retry.tx is not None
        assert retry.tx.committed_by is not None
        assert retry.tx.committed_by.ti_id == "zombie"
        retry.exit()
    finally:
        zombie_db.close()
        retry_db.close()


@pytest.mark.parametrize("target_url", ["postgresql"], indirect=True)
def test_commits_skips_and_rejections_reach_airflow_metrics(attempt: Spawn, dag_id: str) -> None:
    """A commit, a zombie fenced out at start and a retry skipping committed work are counted in Stats."""
    with record_metrics() as sent:
        retry, zombie = attempt("retry", 2), attempt("zombie", 1)
        retry.begin()
        zombie.begin()
        retry.write()
        retry.exit()
        later = attempt("later", 3)
        later.begin()
        later.exit()
    assert (zombie.outcome, retry.outcome, later.outcome) == (
        "fenced_start",
        "committed",
        "already_committed",
    )
    tags = {"dag_id": dag_id, "task_id": "task"}
    assert sent.count("crashsafe.fence.rejected", **tags, stage="start") == 1
    assert sent.count("crashsafe.fence.committed", **tags) == 1
    assert sent.count("crashsafe.fence.skipped_committed", **tags) == 1
    assert [s.name for s in sent.named()] == [
        "crashsafe.fence.rejected",
        "crashsafe.fence.committed",
        "crashsafe.fence.skipped_committed",
    ]
