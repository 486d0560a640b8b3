"""Cross-host liveness of the ledger's in-flight wait: another host's holder is judged by its beacons.

The older attempt runs on a simulated second host (own UTS and PID namespaces, :mod:`tests.support.hosts`)
against the same PostgreSQL store — a fleet's store is one shared database. Its pid means nothing
here, so whether it may still record its call's outcome is read from the audit's liveness beacons.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import pytest

from airflow_crashsafe.effects import effect, idempotency_key
from airflow_crashsafe.errors import OutcomeUnknown
from airflow_crashsafe.store import ledger
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import fake_context
from tests.support.hosts import host_env, other_host, shared_store

pytestmark = pytest.mark.integration

RUN = "scheduled__2026-11-29T00:00:00+00:00"
#: The older attempt, on host-b: records its start and beacons every 0.5 s (as the audit listener
#: does), enters the effect, and says so; on "done" it records its result.
HOLDER = """
import datetime, os, sys, threading, time
from airflow_crashsafe.audit.events import AttemptEvent
from airflow_crashsafe.effects import effect, idempotency_key
from airflow_crashsafe.identity import worker_hostname
from airflow_crashsafe.store import open_store
from airflow_crashsafe.store.attempts import AttemptLog
from airflow_crashsafe.testing import fake_context

log = AttemptLog(open_store())
now = lambda: datetime.datetime.now(datetime.timezone.utc)
me = dict(source="listener", dag_id="payouts", task_id="welcome", map_index=-1, run_id=%(run)r,
          try_number=1, hostname=worker_hostname(), pid=os.getpid())
log.apply(AttemptEvent(**me, started_at=now(), last_seen_at=now()))

def beacons():
    while True:
        time.sleep(0.5)
        log.touch([AttemptEvent(**me, last_seen_at=now())])

threading.Thread(target=beacons, daemon=True).start()
ctx = fake_context(dag_id="payouts", task_id="welcome", run_id=%(run)r, try_number=1)
with effect("welcome-email", context=ctx, payload={"to": "ada"}) as fx:
    print("entered", worker_hostname(), os.getpid(), flush=True)
    sys.stdin.readline()
    fx.done({"message_id": "m-1"})
print("done", flush=True)
time.sleep(60)
"""


@pytest.fixture
def store(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    """The shared PostgreSQL store, seen by this process and by the other hosts."""
    return shared_store(postgres_url, monkeypatch)  # type: ignore[no-any-return]


def _rerun(wait: float) -> Any:
    ctx = fake_context(dag_id="payouts", task_id="welcome", run_id=RUN, try_number=2)
    with effect("welcome-email", context=ctx, payload={"to": "ada"}, in_flight_wait=wait) as fx:
        if fx.pending:
            fx.done({"message_id": "m-2"})
    return fx.result


def test_live_holder_on_another_host_is_awaited_by_its_beacons(store: Store, postgres_url: str) -> None:
    """Its intent is older than the lease, but its beacons are fresh: the re-run waits and adopts."""
    with other_host("host-b", HOLDER % {"run": RUN}, host_env(postgres_url)) as host:
        _, hostname, pid = host.expect("entered").split()
        assert hostname == "host-b" != socket.gethostname()
        time.sleep(4.5)  # the intent is now older than the re-run's 4 s lease
        threading.Timer(1.0, host.send, args=("done",)).start()
        began = time.monotonic()
        result = _rerun(wait=4.0)
        assert result == {"message_id": "m-1"}
        assert 0.5 < time.monotonic() - began < 4.0
        host.expect("done")
    key = idempotency_key(
        "welcome-email", context=fake_context(dag_id="payouts", task_id="welcome", run_id=RUN)
    )
    with store.transaction() as db:
        entry = ledger.get_entry(db, key)
    assert entry is not None
    assert (entry.hostname, entry.pid, entry.try_number, entry.state) == ("host-b", int(pid), 1, "succeeded")


def test_lost_host_is_not_awaited_though_its_pid_runs_here(store: Store, postgres_url: str) -> None:
    """The holder's host is gone: its beacons age past the lease and the re-run stops waiting at once.

    Its pid (small, in its own namespace) is a live process on this machine; it must not count.
    """
    with other_host("host-b", HOLDER % {"run": RUN}, host_env(postgres_url)) as host:
        _, _, pid = host.expect("entered").split()
        host.lose()
    assert _pid_exists_here(int(pid))
    time.sleep(4.5)
    began = time.monotonic()
    with pytest.raises(OutcomeUnknown):
        _rerun(wait=4.0)
    assert time.monotonic() - began < 2.0


def _pid_exists_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
