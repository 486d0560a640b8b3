"""Run one benchmark module in --quick mode against a test server and read its JSON report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def run_quick(
    module: str, server_url: str, workdir: Path, url_flag: str = "--postgres-url"
) -> tuple[str, dict[str, Any]]:
    """``python -m <module> --quick <url_flag> <server_url>``: its stdout and its ``--json`` numbers;
    fails on a non-zero exit."""
    report = workdir / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", module, "--quick", url_flag, server_url, "--json", str(report)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout, json.loads(report.read_text())
