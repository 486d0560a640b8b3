"""Drive the ``airflow-crashsafe`` console script in-process and read what it printed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_crashsafe.cli.main import main

__all__ = ["printed_json", "run_cli"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the console script in-process: (exit code, stdout, stderr); argparse exits count too."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def printed_json(out: str) -> Any:
    """The JSON document printed on stdout (anything logged before it is skipped)."""
    return json.loads(out[out.index("[") :])
