"""The audit across hosts: one try on two simulated hosts, each process pid 1 in its own namespace.

A broker redelivery runs the same try on two workers. Each host here (own UTS and PID namespaces,
:mod:`tests.support.hosts`) records its execution's start and liveness beacons as the audit
listener does, into one shared PostgreSQL store; host-b started first and is lost (SIGKILL of its
namespace), host-a, the redelivery, reports its end. Equal pids on two hosts must stay two
executions, the lost one's end is its last beacon, never a guess from a pid, and the overlap is
measured from the records.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from airflow_crashsafe.audit.cli import find_duplicates
from airflow_crashsafe.store.store import Store
from tests.support.hosts import host_env, other_host, shared_store

pytestmark = pytest.mark.integration

#: One execution of try 1 of payouts.welcome: start and beacons every 0.3 s; on "end" it reports
#: its end (success) and says "ended".
EXECUTION = """
import datetime, os, sys, threading, time
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.identity import worker_hostname
from airflow_crashsafe.store import open_store
from airflow_crashsafe.store.attempts import AttemptLog

log = AttemptLog(open_store())
now = lambda: datetime.datetime.now(datetime.timezone.utc)
me = dict(source="listener", dag_id="payouts", task_id="welcome", map_index=-1,
          run_id="scheduled__2026-11-29T00:00:00+00:00", slot_partition="2026-11-29T00:00:00+00:00",
          try_number=1, hostname=worker_hostname(), pid=os.getpid())
log.apply(AttemptEvent(**me, started_at=now(), last_seen_at=now()))

def beacons():
    while True:
        time.sleep(0.3)
        log.touch([AttemptEvent(**me, last_seen_at=now())])

threading.Thread(target=beacons, daemon=True).start()
print("started", worker_hostname(), os.getpid(), flush=True)
sys.stdin.readline()
log.apply(AttemptEvent(**me, ended_at=now(), reported_state="success", last_seen_at=now()))
print("ended", flush=True)
time.sleep(60)
"""


@pytest.fixture
def store(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    """The shared PostgreSQL store, seen by this process and by the other hosts."""
    return shared_store(postgres_url, monkeypatch)  # type: ignore[no-any-return]


def test_same_try_on_two_hosts_with_equal_pids_stays_two_executions(store: Store, postgres_url: str) -> None:
    """Same try on host-b, then host-a, both pid 1: two overlapping executions; host-b ends at its beacon."""
    env = host_env(postgres_url)
    # host-b received the try first and ran long; the broker redelivered it to host-a, then host-b
    # was lost (#16163, #58441): the same try on two hosts, overlapping.
    with other_host("host-b", EXECUTION, env) as b:
        _, host_b, pid_b = b.expect("started").split()
        time.sleep(1.0)
        with other_host("host-a", EXECUTION, env) as a:
            _, host_a, pid_a = a.expect("started").split()
            assert (host_a, host_b) == ("host-a", "host-b")
            assert pid_a == pid_b  # each is its namespace's first process: a pid says nothing across hosts
            time.sleep(1.5)
            b.lose()
            time.sleep(1.0)
            a.send("end")
            a.expect("ended")
    (report,) = find_duplicates(store, since=timedelta(hours=1), dag_id="payouts")
    by_host = {e.hostname: e for e in report.executions}
    assert set(by_host) == {"host-a", "host-b"}
    assert "same_try_twice" in report.kinds
    assert report.overlap_seconds >= 1.0
    lost, done = by_host["host-b"], by_host["host-a"]
    assert done.ended_at is not None
    assert done.reported_state == "success"
    assert lost.ended_at is None
    assert lost.last_seen_at is not None
    # The lost host is known alive only until its last beacon, before host-a ended.
    assert lost.alive_until < done.ended_at
    assert done.ended_at - lost.alive_until >= timedelta(seconds=0.5)
