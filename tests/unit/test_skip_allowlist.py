"""CI fails on a skip whose reason is not on the allowlist (tests/plugins/skips.py), with or without xdist."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.plugins.skips import load_allowlist

REPO = Path(__file__).resolve().parents[2]

SKIPPING = '''
    import pytest

    def test_runs():
        """Runs."""

    def test_skips():
        """Skips in its body."""
        pytest.skip("no server here")

    @pytest.mark.skipif(True, reason="not on this platform")
    def test_skipif():
        """Skipped by a mark."""

    def test_importorskip():
        """Skips on a missing module."""
        pytest.importorskip("no_such_module_anywhere")

    @pytest.mark.xfail(reason="a known bug")
    def test_xfail():
        """Fails, as expected."""
        assert False
    '''
MODULE_SKIP = """
    import pytest

    pytest.skip("a module for another Airflow", allow_module_level=True)
    """
EVERY_REASON = {
    "test_skipping.py::test_skips": "no server here",
    "test_skipping.py::test_skipif": "not on this platform",
    "test_skipping.py::test_importorskip": "could not import 'no_such_module_anywhere'.*",
    "test_skipping.py::test_xfail": "xfail: a known bug",
    "test_module_skip.py": "a module for another Airflow",
}


def _allowlist(entries: dict[str, str]) -> str:
    return "".join(
        f"[[skip]]\nwhere = {where!r}\nreason = {reason!r}\nwhy = 'the test says why'\n\n"
        for where, reason in entries.items()
    )


def _run(tmp_path: Path, allowed: str, *args: str, ci: bool = True) -> subprocess.CompletedProcess[str]:
    """pytest with only the skip plugin on the two modules above; CI set or not."""
    (tmp_path / "test_skipping.py").write_text(textwrap.dedent(SKIPPING))
    (tmp_path / "test_module_skip.py").write_text(textwrap.dedent(MODULE_SKIP))
    (tmp_path / "allow.toml").write_text(allowed)
    (tmp_path / "pytest.ini").write_text("[pytest]\nallowed_skips = allow.toml\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(REPO)}
    if ci:
        env["CI"] = "true"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        "pytest.ini",
        "--rootdir",
        ".",
        "-p",
        "tests.plugins.skips",
    ]
    command += ["-p", "no:cacheprovider", *args, "test_skipping.py", "test_module_skip.py"]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


WORKERS = pytest.mark.parametrize(
    "workers",
    [
        pytest.param(["-p", "no:xdist"], id="one-process"),
        pytest.param(["-n", "2"], id="xdist", marks=pytest.mark.slow),
    ],
)


@WORKERS
def test_in_ci_an_unlisted_skip_fails_the_run_naming_it(tmp_path: Path, workers: list[str]) -> None:
    """CI=true: skip, skipif, importorskip, a module skip and an xfail not listed fail the run, each named."""
    listed = {"test_skipping.py::test_skipif": "not on this platform"}
    run = _run(tmp_path, _allowlist(listed), *workers)
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "UNEXPECTED SKIP test_skipping.py::test_skips: no server here" in output
    assert "UNEXPECTED SKIP test_skipping.py::test_importorskip: could not import" in output
    assert "UNEXPECTED SKIP test_skipping.py::test_xfail: xfail: a known bug" in output
    assert "UNEXPECTED SKIP test_module_skip.py: a module for another Airflow" in output
    assert "test_skipif" not in output.split("UNEXPECTED SKIP", 1)[1]  # listed: accepted


@WORKERS
def test_in_ci_listed_skips_pass(tmp_path: Path, workers: list[str]) -> None:
    """CI=true with every reason listed for its tests: the run passes."""
    run = _run(tmp_path, _allowlist(EVERY_REASON), *workers)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "UNEXPECTED SKIP" not in run.stdout


def test_a_listed_reason_covers_only_the_tests_it_names(tmp_path: Path) -> None:
    """A reason allowed for one test does not excuse another test skipping with it."""
    entries = EVERY_REASON | {"test_skipping.py::test_skipif": "no server here"}
    run = _run(tmp_path, _allowlist(entries), "-p", "no:xdist")
    assert run.returncode == 1
    assert "UNEXPECTED SKIP test_skipping.py::test_skipif: not on this platform" in run.stdout


def test_outside_ci_skips_are_only_reported(tmp_path: Path) -> None:
    """Without CI the same unlisted skips leave the run green."""
    run = _run(tmp_path, _allowlist({}), "-p", "no:xdist", ci=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "UNEXPECTED SKIP" not in run.stdout


def test_an_entry_without_a_why_is_refused(tmp_path: Path) -> None:
    """An allowlist entry must say why; the run stops at once naming the file and the entry."""
    run = _run(tmp_path, "[[skip]]\nwhere = '*'\nreason = '.*'\n", "-p", "no:xdist")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    assert "allow.toml: [[skip]] number 1 has keys ['reason', 'where']" in run.stderr


def test_the_repositorys_allowlist_loads_and_says_why_for_each_entry() -> None:
    """tests/allowed_skips.toml parses, and every entry explains itself."""
    entries = load_allowlist(REPO / "tests" / "allowed_skips.toml")
    assert entries
    assert all(len(entry.why.split()) >= 8 for entry in entries)
