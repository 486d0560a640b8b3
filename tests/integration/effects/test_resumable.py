"""CrashsafeResumableJobMixin against a real job service: a crash between submit and persist."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import airflow.sdk
import pytest

if not hasattr(airflow.sdk, "ResumableJobMixin"):  # the floor release (3.2) has no resumable jobs
    pytest.skip("Airflow's ResumableJobMixin arrived in 3.3", allow_module_level=True)

from airflow_crashsafe.errors import IdempotencyConflict
from airflow_crashsafe.store import ledger
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import fake_context
from tests.support.jobs import JobService, KeyedJobOperator, job_service
from tests.support.processes import run_module

pytestmark = pytest.mark.integration


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[JobService]:
    """A job service whose jobs run 0.3 s, reachable by the attempts run in subprocesses."""
    with job_service(run_seconds=0.3) as running:
        monkeypatch.setenv("JOB_SERVICE_URL", running.url)
        monkeypatch.setenv("JOB_STATE_FILE", str(tmp_path / "task_state_store.json"))
        yield running


def attempt(try_number: int, crash_point: str, kind: str = "keyed") -> tuple[int, str]:
    """Run one attempt in its own process (so it can be SIGKILLed); its exit code and last line."""
    done = run_module("tests.support.job_task", str(try_number), crash_point, kind)
    out, err = done.communicate(timeout=120)
    assert done.returncode is not None
    lines = out.strip().splitlines()
    return done.returncode, lines[-1] if lines else err[-2000:]


def ctx(try_number: int) -> dict[str, Any]:
    return fake_context(dag_id="warehouse", task_id="nightly_job", try_number=try_number)


def keyed(service: JobService, **kwargs: Any) -> KeyedJobOperator:
    return KeyedJobOperator(task_id="nightly_job", service_url=service.url, **kwargs)


def test_crash_between_submit_and_persist_resumes_the_job_by_key(store: Store, service: JobService) -> None:
    """Killed after the service created the job, before its id was recorded: the retry finds it by key."""
    code, _ = attempt(1, "after_submit")
    assert code == -signal.SIGKILL
    assert service.submissions == 1
    code, out = attempt(2, "none")
    assert (code, out) == (0, "job-1")
    assert service.submissions == 1
    (entry,) = [e for e in _entries(store) if e.target == "nightly_job"]
    assert entry.state == "succeeded"
    assert entry.result == {"external_id": "job-1", "found_by_key": True}
    assert service.names() == [entry.idem_key]
    (adopted,) = store.events(dag_id="warehouse", kinds=["adopted"])
    detail = adopted["detail"]
    assert (detail["key"], detail["adopted_try"], detail["external_id"], detail["found_by"]) == (
        entry.idem_key,
        1,
        "job-1",
        "key",
    )


def test_plain_resumable_job_mixin_submits_twice_after_the_same_crash(service: JobService) -> None:
    """The control: Airflow's ResumableJobMixin, killed at the same point, submits a second job."""
    code, _ = attempt(1, "after_submit", "plain")
    assert code == -signal.SIGKILL
    code, out = attempt(2, "none", "plain")
    assert (code, out) == (0, "job-2")
    assert service.submissions == 2


def test_without_lookup_by_key_the_retry_stops_and_submits_nothing(store: Store, service: JobService) -> None:
    """A service that cannot be queried by key: the retry raises OutcomeUnknown, nothing submitted."""
    code, _ = attempt(1, "after_submit", "keyed-nolookup")
    assert code == -signal.SIGKILL
    code, out = attempt(2, "none", "keyed-nolookup")
    assert (code, out) == (3, "OutcomeUnknown")
    assert service.submissions == 1
    (entry,) = _entries(store)
    assert entry.state == "unknown"


def test_crash_before_the_job_existed_submits_once_on_retry(store: Store, service: JobService) -> None:
    """Intent recorded but the submission never happened: the lookup finds nothing and submits now."""
    operator = keyed(service)
    original = operator._post_job

    def never_arrives(name: str) -> str:
        raise ConnectionError("service unreachable")

    operator._post_job = never_arrives  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        operator.execute(ctx(1))
    operator._post_job = original  # type: ignore[method-assign]
    assert operator.execute(ctx(2)) == {"job": "job-1", "rows": 42}
    assert service.submissions == 1


def test_retry_of_a_succeeded_job_returns_its_result_without_submitting(
    store: Store, service: JobService
) -> None:
    """A job recorded and finished is never submitted again; the retry returns its result."""
    first = keyed(service).execute(ctx(1))
    assert keyed(service).execute(ctx(2)) == first
    assert service.submissions == 1


def test_retry_reconnects_to_a_job_still_running(store: Store, service: JobService) -> None:
    """An attempt that died while its job ran: the retry polls that job instead of submitting."""
    operator = keyed(service)

    def die_while_polling(external_id: Any, context: Any) -> None:
        raise KeyboardInterrupt  # the worker went away mid-poll

    operator.poll_until_complete = die_while_polling  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        operator.execute(ctx(1))
    assert keyed(service).execute(ctx(2)) == {"job": "job-1", "rows": 42}
    assert service.submissions == 1


def test_failed_job_is_submitted_again_under_the_next_key(store: Store, service: JobService) -> None:
    """A job that ended FAILED is resubmitted on retry, under a new key, as ResumableJobMixin does."""
    operator = keyed(service)
    original = operator._post_job

    def doomed(name: str) -> str:
        service.fail_names.add(name)
        return original(name)

    operator._post_job = doomed  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="FAILED"):
        operator.execute(ctx(1))
    assert keyed(service).execute(ctx(2)) == {"job": "job-2", "rows": 42}
    first, second = service.names()
    assert first != second
    assert sorted(e.version for e in _entries(store)) == [1, 2]


def test_changed_job_request_under_one_key_is_a_conflict(store: Store, service: JobService) -> None:
    """The same slot submitting a different job spec is refused, nothing submitted."""
    keyed(service).execute(ctx(1))
    other = keyed(service)
    other.crashsafe_job_request = lambda context: {"spec": "changed"}  # type: ignore[method-assign]
    with pytest.raises(IdempotencyConflict):
        other.execute(ctx(2))
    assert service.submissions == 1


def _entries(store: Store) -> list[ledger.LedgerEntry]:
    with store.transaction() as db:
        return ledger.list_entries(db, dag_id="warehouse")
