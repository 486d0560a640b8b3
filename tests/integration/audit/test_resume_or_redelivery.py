"""A deferral resumed vs one try started twice, and a lost host's retry, classified from the real store.

The records are what the listener writes (:mod:`airflow_crashsafe.audit.events`), stored and read
back through :class:`~airflow_crashsafe.store.attempts.AttemptLog`, so the ``resumed`` column and
the merge of a scheduler verdict into a process's row are exercised as in production.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_crashsafe.audit.cli import find_duplicates
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.store.attempts import AttemptLog
from airflow_crashsafe.store.store import Store

pytestmark = pytest.mark.integration

T0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
KEY = {
    "dag_id": "billing",
    "task_id": "charge",
    "map_index": -1,
    "run_id": "scheduled__2026-12-01",
    "slot_partition": "2026-12-01T00:00:00+00:00",
}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def process(try_number: int, host: str, pid: int) -> dict[str, object]:
    return {"source": "listener", **KEY, "try_number": try_number, "hostname": host, "pid": pid}


def start(log: AttemptLog, try_number: int, host: str, pid: int, when: float, *, resumed: bool) -> None:
    me = process(try_number, host, pid)
    log.apply(
        AttemptEvent(
            **me, ti_id=f"ti-{try_number}", started_at=at(when), last_seen_at=at(when), resumed=resumed
        )
    )  # type: ignore[arg-type]


def beacon(log: AttemptLog, try_number: int, host: str, pid: int, when: float) -> None:
    log.touch([AttemptEvent(**process(try_number, host, pid), last_seen_at=at(when))])  # type: ignore[arg-type]


def end(log: AttemptLog, try_number: int, host: str, pid: int, when: float) -> None:
    me = process(try_number, host, pid)
    log.apply(AttemptEvent(**me, ended_at=at(when), reported_state="success", last_seen_at=at(when)))  # type: ignore[arg-type]


def test_a_deferral_resumed_elsewhere_is_one_execution_though_its_stop_is_missing(store: Store) -> None:
    """Deferred at 20 (stop still spooled), resumed on host-a recording the try's start: no duplicate."""
    log = AttemptLog(store)
    start(log, 1, "host-b", 40, 1.0, resumed=False)
    beacon(log, 1, "host-b", 40, 20.0)
    start(log, 1, "host-a", 41, 0.0, resumed=True)  # the try's original start_date
    end(log, 1, "host-a", 41, 90.0)
    assert find_duplicates(store, since=timedelta(hours=1), dag_id="billing") == []


def test_one_try_started_again_five_seconds_later_is_reported_whichever_dies_first(store: Store) -> None:
    """The second start of try 1 (not a resume) on host-a, lost first: same_try_twice, two executions."""
    log = AttemptLog(store)
    start(log, 1, "host-b", 40, 0.0, resumed=False)
    start(log, 1, "host-a", 41, 5.0, resumed=False)
    beacon(log, 1, "host-a", 41, 10.0)  # host-a lost after this
    end(log, 1, "host-b", 40, 100.0)
    (report,) = find_duplicates(store, since=timedelta(hours=1), dag_id="billing")
    assert {e.hostname for e in report.executions} == {"host-a", "host-b"}
    assert report.kinds == ("overlap", "same_try_twice")
    assert report.overlap_seconds >= 5.0


def test_a_lost_hosts_try_failed_at_the_heartbeat_timeout_then_retried_is_a_crash_rerun(store: Store) -> None:
    """The scheduler's heartbeat-timeout verdict is not the process's end: the retry is a reset re-run."""
    log = AttemptLog(store)
    start(log, 1, "worker-b", 12, 0.0, resumed=False)
    beacon(log, 1, "worker-b", 12, 20.0)  # worker-b lost after this
    verdict = {k: v for k, v in process(1, "worker-b", 12).items() if k != "source"}
    log.apply(AttemptEvent(source="scheduler", **verdict, ended_at=at(45), state="up_for_retry"))  # type: ignore[arg-type]
    start(log, 2, "worker-a", 13, 47.0, resumed=False)
    end(log, 2, "worker-a", 13, 90.0)
    (report,) = find_duplicates(store, since=timedelta(hours=1), dag_id="billing")
    assert [e.hostname for e in report.executions] == ["worker-b", "worker-a"]
    assert report.kinds == ("reset_rerun",)
    assert report.risk == "high"
