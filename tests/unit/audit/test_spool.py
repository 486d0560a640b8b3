"""The spool's claimed files: a dead drainer's are drained again at once, a live one's are left alone."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.audit.spool import Spool

EVENT = AttemptEvent(
    source="listener",
    dag_id="nightly",
    task_id="merge",
    map_index=-1,
    run_id="r",
    try_number=2,
    hostname="w1",
    pid=31820,
    ended_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    reported_state="deferred",
)


def dead_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(proc.stdout)


def claimed_by(spool: Spool, drainer: str) -> Path:
    """A spool file as a drainer leaves it when it dies between claiming and deleting it."""
    spool.append([EVENT])
    claimed = spool.path.with_name(f"{spool.path.name.split('.')[0]}.{drainer}.draining")
    os.rename(spool.path, claimed)
    return claimed


def test_a_file_claimed_by_a_dead_drainer_is_delivered_at_once(tmp_path: Path) -> None:
    """A task process killed (os._exit) mid-drain must not hide the suspension it claimed for 5 min."""
    spool = Spool(tmp_path)
    claimed = claimed_by(spool, f"{dead_pid()}-0badc0de")
    assert spool.pending_files() == [claimed]
    got: list[AttemptEvent] = []
    assert spool.drain(got.append) == 1
    assert got == [EVENT]
    assert list(tmp_path.iterdir()) == []


def test_a_file_claimed_by_a_live_drainer_is_left_to_it(tmp_path: Path) -> None:
    """A drain under way in a live process is not taken over (nor one of an older, pid-less name)."""
    live = Spool(tmp_path / "live")
    claimed_by(live, f"{os.getpid()}-0badc0de")
    assert live.pending_files() == []
    old = Spool(tmp_path / "old")
    claimed_by(old, "0badc0de")
    assert old.pending_files() == []


def test_a_drain_names_its_claims_after_its_pid(tmp_path: Path) -> None:
    """What the liveness check reads: ``events-<writer>.<drainer pid>-<hex>.draining``."""
    spool = Spool(tmp_path)
    spool.append([EVENT])
    seen: list[str] = []
    spool.drain(lambda e: seen.extend(p.name for p in tmp_path.glob("*.draining")))
    [name] = seen
    assert name.split(".")[1].startswith(f"{os.getpid()}-")


class _BadData(Exception):
    """What psycopg raises for a value the column cannot take (SQLSTATE class 22)."""

    sqlstate = "22P02"


def _spool_lines(spool: Spool, lines: list[bytes]) -> None:
    spool.directory.mkdir(parents=True, exist_ok=True)
    spool.path.write_bytes(b"".join(line + b"\n" for line in lines))


def _line(event: AttemptEvent, **changes: object) -> bytes:
    return json.dumps({**event.to_json(), **changes}, sort_keys=True).encode()


def test_a_poison_line_is_quarantined_and_the_rest_delivered(tmp_path: Path) -> None:
    """A wrong-typed field goes to a .poison file (logged once); the events after it still arrive."""
    spool = Spool(tmp_path)
    later = dataclasses.replace(EVENT, try_number=3)
    _spool_lines(spool, [_line(EVENT), _line(EVENT, pid="12ab"), b"{not json", _line(later)])
    got: list[AttemptEvent] = []
    assert spool.drain(got.append) == 2
    assert got == [EVENT, later]
    poison = list(tmp_path.glob("*.poison"))
    assert len(poison) == 1
    assert b'"pid": "12ab"' in poison[0].read_bytes()
    assert spool.pending_files() == []
    assert spool.drain(got.append) == 0  # nothing left to block, nothing delivered twice


def test_an_event_the_store_refuses_as_bad_data_is_quarantined(tmp_path: Path) -> None:
    """An event the store rejects for its content is set aside; the next ones are delivered."""
    spool = Spool(tmp_path)
    refused = dataclasses.replace(EVENT, task_id="refused")
    spool.append([refused, EVENT])
    got: list[AttemptEvent] = []

    def apply(event: AttemptEvent) -> None:
        if event.task_id == "refused":
            raise _BadData("invalid input syntax for type integer")
        got.append(event)

    assert spool.drain(apply) == 1
    assert got == [EVENT]
    assert b'"task_id": "refused"' in next(tmp_path.glob("*.poison")).read_bytes()


def test_a_store_outage_keeps_every_event_for_later(tmp_path: Path) -> None:
    """A store that is down is not bad data: nothing is quarantined, everything stays spooled."""
    spool = Spool(tmp_path)
    spool.append([EVENT, EVENT])

    def down(event: AttemptEvent) -> None:
        raise ConnectionError("store down")

    with pytest.raises(ConnectionError):
        spool.drain(down)
    assert list(tmp_path.glob("*.poison")) == []
    assert spool.count() == 2
