"""Helpers of the team's own that are not loaded are read from their files, never imported."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_crashsafe.scan.model import combine
from airflow_crashsafe.scan.python_code import analyze_callable

HELPER = """
import requests

BASE = "https://api.vendor.example.com/2/0"


def transfer_data(workspace: str, payload: str) -> None:
    _upload(f"{BASE}/workspaces/{workspace}/files/1", payload)


def _upload(url: str, payload: str) -> None:
    requests.put(url, data=payload, timeout=60)
    requests.post(f"{url}/complete", timeout=60)


def checksum(payload: str) -> int:
    return len(payload)


class Harvest:
    @classmethod
    def create(cls, session):
        harvest = cls()
        session.add(harvest)
        session.commit()
        return harvest
"""


def _transfers(payload: str) -> None:
    from teamhelpers.upload import transfer_data  # type: ignore[import-not-found]

    transfer_data("w1", payload)


def _checksums(payload: str) -> int:
    from teamhelpers.upload import checksum  # type: ignore[import-not-found]

    return checksum(payload)


def _creates_harvest(session: object) -> None:
    from teamhelpers.upload import Harvest  # type: ignore[import-not-found]

    Harvest.create(session)


def _calls_a_missing_helper() -> None:
    from teamhelpers.nowhere import sync  # type: ignore[import-not-found]

    sync()


@pytest.fixture
def helpers_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "teamhelpers"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('the scan must not import this package')\n")
    (package / "upload.py").write_text(HELPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    return package


def test_unloaded_helper_is_read_and_followed(helpers_on_path: Path) -> None:
    """A helper imported inside the task, from a module never loaded, is walked: its POST is found."""
    found = combine(analyze_callable(_transfers, markers=["2031-07-14"]))
    assert (found.verdict, found.category) == ("risky", "http_mutating")
    assert found.reasons[0].file == str(helpers_on_path / "upload.py")
    assert "teamhelpers" not in sys.modules


def test_unloaded_pure_helper_stays_pure(helpers_on_path: Path) -> None:
    """A helper that only computes is read too, and is pure."""
    assert combine(analyze_callable(_checksums, markers=["2031-07-14"])).verdict == "safe"


def test_unloaded_class_method_is_read(helpers_on_path: Path) -> None:
    """A classmethod of an unloaded module (an ORM model's create()) is walked: its insert is an append."""
    found = combine(analyze_callable(_creates_harvest, markers=["2031-07-14"]))
    assert (found.verdict, found.category) == ("risky", "append")


def test_team_code_that_cannot_be_found_is_unknown(helpers_on_path: Path) -> None:
    """A call into the team's package that the scan cannot find is unknown, never pure."""
    found = combine(analyze_callable(_calls_a_missing_helper, markers=["2031-07-14"]))
    assert (found.verdict, found.category) == ("unknown", "unreadable_callable")
