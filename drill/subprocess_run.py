"""Run ``python -m drill`` as its own process from this checkout, as the end-to-end tests do.

The drill installs signal handlers and starts process groups, so its tests run it as a subprocess
(as ``./dev drill`` does) and read its facts back from ``--facts-json``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import psutil

from drill.airflow_home import repo_root
from drill.facts import DrillFacts

__all__ = ["left_behind", "run_drill", "run_fleet_drill"]


def _run(
    options: Sequence[str], workdir: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], Path]:
    facts_path = workdir / "facts.json"
    root = str(repo_root())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    env.pop("AIRFLOW_HOME", None)
    done = subprocess.run(
        [sys.executable, "-m", "drill", *options, "--workdir", str(workdir), "--facts-json", str(facts_path)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(done.stdout, done.stderr[-5000:], sep="\n")
    assert facts_path.exists(), f"the drill wrote no facts (rc {done.returncode}):\n{done.stdout}"
    return done, facts_path


def run_fleet_drill(
    options: Sequence[str], workdir: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], dict[str, DrillFacts]]:
    """``python -m drill --executor celery OPTIONS``: its output and each scenario's facts."""
    from drill.fleet_cli import load_facts

    done, path = _run(["--executor", "celery", *options], workdir, timeout)
    return done, load_facts(path)


def run_drill(
    options: Sequence[str], workdir: Path, timeout: float
) -> tuple[subprocess.CompletedProcess[str], DrillFacts]:
    """``python -m drill OPTIONS`` with its home under ``workdir``; its output is echoed for the test log.

    AssertionError (with the drill's output) when it wrote no facts.
    """
    done, facts_path = _run(options, workdir, timeout)
    return done, DrillFacts.from_json(facts_path.read_text())


def left_behind(sessions: Sequence[int]) -> list[list[str]]:
    """Command lines of processes still running in any of a drill's sessions (none expected)."""
    left = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) in sessions:
                left.append(proc.cmdline())
        except (psutil.Error, OSError):
            continue
    return left
