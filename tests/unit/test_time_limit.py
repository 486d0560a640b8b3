"""The per-test time limit fires on xdist lanes, also where pytest-timeout's alarm alone does not.

A pytest run of its own (the repository's ini and ``tests/conftest.py``, two workers on the
lanes of ``./dev test``) runs tests that sleep past a short limit: a plain one (the alarm fails it),
one that first parses a DAG with Airflow's DagBag (which disarms the alarm), and a Hypothesis
property (which catches the alarm's failure and replays examples). Each must be reported failed,
the run must end within a bound, and the tests after a plain overrun still run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMIT = 8  # seconds: time for a worker to parse one DAG file, well short of the sleeps
GRACE = 3
#: The whole sub-run: two workers start, one is replaced twice, three overruns of LIMIT + GRACE.
BOUND = 240

SUBJECTS = {
    "test_plain_overrun.py": f'''
        import time

        import pytest


        @pytest.mark.timeout({LIMIT})
        def test_sleeps_past_its_limit():
            """Ended by pytest-timeout's alarm."""
            time.sleep(600)


        def test_after_it():
            """Runs on the same worker."""
        ''',
    "test_airflow_overrun.py": f'''
        import time

        import pytest
        from airflow.dag_processing.dagbag import DagBag


        @pytest.mark.timeout({LIMIT})
        def test_parses_a_dag_then_sleeps(tmp_path):
            """DagBag's import timeout leaves the alarm disarmed."""
            (tmp_path / "one.py").write_text("from airflow.sdk import DAG\\nd = DAG('d', schedule=None)\\n")
            assert DagBag(dag_folder=str(tmp_path), safe_mode=False).dags
            time.sleep(600)
        ''',
    "test_caught_overrun.py": f'''
        import time

        import pytest
        from hypothesis import given, settings, strategies as st


        @pytest.mark.timeout({LIMIT})
        @settings(database=None, deadline=None, max_examples=5)
        @given(st.integers())
        def test_property_blocks(n):
            """Hypothesis catches the alarm's failure and runs the body again."""
            time.sleep(600)
        ''',
}


def _outcomes(report: Path) -> dict[str, str]:
    """``module::test`` -> passed, failed or skipped, from a JUnit XML report."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}.py::{case.get('name')}"
        tags = {child.tag for child in case}
        failed = tags & {"failure", "error"}
        if name in outcomes and outcomes[name] == "failed":
            continue  # a crash is reported after the test's own start
        outcomes[name] = "failed" if failed else "skipped" if "skipped" in tags else "passed"
    return outcomes


@pytest.mark.slow
def test_every_overrun_is_reported_failed_within_a_bound(tmp_path: Path) -> None:
    """A test past its limit fails even after Airflow disarmed the alarm or Hypothesis caught it."""
    for name, source in SUBJECTS.items():
        (tmp_path / name).write_text(textwrap.dedent(source))
    report = tmp_path / "report.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(REPO / "pyproject.toml"),
        "--rootdir",
        str(tmp_path),
        "-p",
        "tests.conftest",  # the suite's own set-up: isolated AIRFLOW_HOME, lanes, the time limit
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "-o",
        f"timeout_backstop_grace={GRACE}",
        f"--junitxml={report}",
        *SUBJECTS,
    ]
    env = os.environ | {"PYTHONPATH": str(REPO)}
    began = time.monotonic()
    run = subprocess.Popen(  # its own session: its workers go with it if it overruns
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = run.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        output, _ = run.communicate()
        pytest.fail(f"the sub-run was still going after {BOUND} s: a time limit did not fire\n{output}")
    took = time.monotonic() - began
    assert run.returncode == 1, output
    assert _outcomes(report) == {
        "test_plain_overrun.py::test_sleeps_past_its_limit": "failed",
        "test_plain_overrun.py::test_after_it": "passed",
        "test_airflow_overrun.py::test_parses_a_dag_then_sleeps": "failed",
        "test_caught_overrun.py::test_property_blocks": "failed",
    }, output
    assert "Timeout (>8.0s)" in output  # the plain overrun: the alarm's own failure
    for ended in (
        "test_airflow_overrun.py::test_parses_a_dag_then_sleeps",
        "test_caught_overrun.py::test_property_blocks",
    ):
        assert f"time limit: {ended} still runs {GRACE} s after its {LIMIT} s limit" in output, output
        assert output.count(f"crashed while running '{ended}'") == 1, output  # not run again
    assert took < BOUND
