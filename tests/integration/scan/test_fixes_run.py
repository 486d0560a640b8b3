"""The scan's fixes, applied to example DAGs, run: a re-run after success does not repeat the effect.

Each fixed task from tests/data/scan_fixes/ runs twice, as a crash's re-run would, against a local
vendor and the embedded crashsafe store; the trigger's re-run goes through Airflow's own handling
of an existing DAG run. The unfixed task runs the same way, to show what the fix changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from airflow_crashsafe.errors import ConfigurationError
from airflow_crashsafe.store.store import Store
from airflow_crashsafe.testing import NaiveVendor, fake_context

pytestmark = pytest.mark.integration

FIXES = Path(__file__).resolve().parents[2] / "data" / "scan_fixes"


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Store]:
    """The embedded crashsafe store in a file of this test's own."""
    from airflow_crashsafe.store import open_store, reset_store_cache

    monkeypatch.delenv("AIRFLOW_CONN_CRASHSAFE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW__CRASHSAFE__EMBEDDED_PATH", str(tmp_path / "crashsafe.db"))
    reset_store_cache()
    yield open_store()
    reset_store_cache()


@pytest.fixture
def vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[NaiveVendor]:
    """A vendor that books every request, behind the URLs and connection the example DAGs read."""
    with NaiveVendor() as naive:
        monkeypatch.setenv("AIRFLOW_CONN_VENDOR", naive.url)
        monkeypatch.setenv("ONCALL_WEBHOOK", f"{naive.url}/oncall")
        monkeypatch.setenv("VENDOR_URL", naive.url)
        yield naive


def dag(name: str, dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(FIXES / name), safe_mode=False)
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def ctx(dag_id: str, task_id: str, try_number: int) -> dict[str, Any]:
    return fake_context(dag_id=dag_id, task_id=task_id, try_number=try_number)


def test_http_operator_fix_books_once_across_two_attempts(store: Store, vendor: NaiveVendor) -> None:
    """The IdempotentHttpOperator the scan named sends once; the second attempt replays the result."""
    task = dag("http_operator_after.py", "fix_http_operator_after").get_task("book_payout")
    first = task.execute(ctx("fix_http_operator_after", "book_payout", 1))
    second = task.execute(ctx("fix_http_operator_after", "book_payout", 2))
    assert second == first
    assert vendor.bookings == 1


def test_task_post_fix_books_once_and_returns_the_same_answer(store: Store, vendor: NaiveVendor) -> None:
    """The callable wrapped in effect() as the fix says posts once; the re-run returns the recorded answer."""
    fixed = dag("task_post_after.py", "fix_task_post_after").get_task("push_invoice").python_callable
    answers = [fixed(ds="2031-07-14", **ctx("fix_task_post_after", "push_invoice", n)) for n in (1, 2)]
    assert answers[0] == answers[1]
    assert vendor.bookings == 1
    plain = dag("task_post_before.py", "fix_task_post_before").get_task("push_invoice").python_callable
    plain(ds="2031-07-14")
    plain(ds="2031-07-14")
    assert vendor.bookings == 3  # without the fix, each run books again


def test_callback_fix_leaves_the_dag_callback_working(store: Store, vendor: NaiveVendor) -> None:
    """The DAG-level callback still alerts without a task context; the task wrapper alerts once per run."""
    fixed = dag("callback_after.py", "fix_callback_after")
    fixed.on_failure_callback({"dag_run": SimpleNamespace(dag_id="fix_callback_after")})
    assert vendor.bookings == 1
    page = fixed.get_task("page_oncall").python_callable
    page(**ctx("fix_callback_after", "page_oncall", 1))
    page(**ctx("fix_callback_after", "page_oncall", 2))
    assert vendor.bookings == 2


def test_effect_inside_a_dag_callback_would_fail(store: Store) -> None:
    """Why the callback keeps its body: effect() there has no task context and refuses to run."""
    from airflow_crashsafe.effects import effect

    with pytest.raises(ConfigurationError, match="No task context"), effect("page_oncall"):
        pass


@pytest.mark.parametrize(
    ("name", "dag_id", "state"),
    [
        ("trigger_after.py", "fix_trigger_after", "skipped"),
        ("trigger_before.py", "fix_trigger_before", "failed"),
    ],
)
def test_trigger_rerun_skips_only_with_the_fix(
    name: str, dag_id: str, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow's handling of a re-run that finds its DAG run: skipped with the fix, failed without."""
    from airflow.sdk.exceptions import DagRunTriggerException, ErrorType
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import ErrorResponse

    task = dag(name, dag_id).get_task("kick_reports")
    task.trigger_run_id = "scheduled__2031-07-14T00:00:00+00:00_reports"  # as rendered for the run
    with pytest.raises(DagRunTriggerException) as raised:
        task.execute({"ti": None})
    answer = ErrorResponse(error=ErrorType.DAGRUN_ALREADY_EXISTS)
    monkeypatch.setattr(
        task_runner, "SUPERVISOR_COMMS", SimpleNamespace(send=lambda msg: answer), raising=False
    )
    ti = SimpleNamespace(rendered_map_index=None)
    _, outcome = task_runner._handle_trigger_dag_run(raised.value, {}, ti, structlog.get_logger())
    assert outcome.value == state
