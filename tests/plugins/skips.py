"""In CI, a test that does not run must have a reason someone accepted: skips on an allowlist.

A skip hides whatever regression sits behind it, and the reasons CI should never see (a missing
server, a moved file, a package the locks install) look like any other in pytest's summary. So with
``CI`` set, every skipped, xfailed or xpassed test (``pytest.skip``, ``skipif``, ``importorskip``, a
module-level skip, ``xfail``) is matched against ``tests/allowed_skips.toml``: an entry names the
tests (``where``, a glob of node ids), the reason (``reason``, a regular expression the whole reason
must match) and ``why`` it is legitimate. Any other one fails the run, listed with its reason.

The reports are judged where they all arrive: the controller under pytest-xdist (workers send
their skipped test and collection reports there), the one process otherwise.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib

from tests.support.ci import in_ci

__all__ = ["ALLOWLIST_INI", "Allowed", "SkipGuard", "load_allowlist", "skip_reason"]

#: The ini option naming the allowlist, relative to the ini file's directory.
ALLOWLIST_INI = "allowed_skips"
_KEYS = {"where", "reason", "why"}


@dataclass(frozen=True)
class Allowed:
    """One accepted skip: which tests, for which reason, and why that is legitimate."""

    where: str
    reason: re.Pattern[str]
    why: str

    def covers(self, nodeid: str, reason: str) -> bool:
        return fnmatch.fnmatchcase(nodeid, self.where) and self.reason.fullmatch(reason) is not None


def load_allowlist(path: Path) -> list[Allowed]:
    """The entries of ``path``; a :class:`pytest.UsageError` naming what is wrong otherwise."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise pytest.UsageError(f"{path}: cannot read the skip allowlist ({exc}).") from None
    entries = data.pop("skip", [])
    if data or not isinstance(entries, list):
        raise pytest.UsageError(
            f"{path}: only [[skip]] tables belong here, found {sorted(data) or entries!r}."
        )
    allowed = []
    for number, entry in enumerate(entries, 1):
        problem = None
        if set(entry) != _KEYS:
            problem = f"has keys {sorted(entry)}; give exactly {sorted(_KEYS)}"
        elif not all(isinstance(entry[key], str) and entry[key].strip() for key in _KEYS):
            problem = "needs a non-empty string for each of where, reason and why"
        else:
            try:
                allowed.append(Allowed(entry["where"], re.compile(entry["reason"], re.DOTALL), entry["why"]))
            except re.error as exc:
                problem = f"reason is not a regular expression ({exc})"
        if problem:
            raise pytest.UsageError(f"{path}: [[skip]] number {number} {problem}.")
    return allowed


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str | None:
    """The reason a report did not run or count its test (skip, xfail, xpass), or None if it did."""
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return "xfail: " + str(wasxfail).removeprefix("reason: ")
    if not report.skipped:
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple | list) and len(longrepr) == 3:  # (path, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipGuard:
    """Collects the skips no entry covers and fails the session when there are any."""

    def __init__(self, path: Path, allowed: list[Allowed]) -> None:
        self.path = path
        self.allowed = allowed
        self.unlisted: dict[str, str] = {}  # node id -> reason

    def _judge(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        reason = skip_reason(report)
        if reason is None or any(entry.covers(report.nodeid, reason) for entry in self.allowed):
            return
        self.unlisted.setdefault(report.nodeid, reason)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._judge(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._judge(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unlisted and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.unlisted:
            return
        terminalreporter.section(f"skips not on {self.path.name} (CI fails on them)", sep="=", red=True)
        for nodeid, reason in self.unlisted.items():
            terminalreporter.line(f"UNEXPECTED SKIP {nodeid}: {reason}")
        terminalreporter.line(
            f"Make the test run in CI, or add a [[skip]] to {self.path} saying why it may not."
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        ALLOWLIST_INI,
        "The skips CI accepts, relative to the ini file's directory (tests/plugins/skips.py).",
        default="tests/allowed_skips.toml",
    )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # an xdist worker: its controller judges
        return
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    path = base / config.getini(ALLOWLIST_INI)
    allowed = load_allowlist(path)  # also outside CI: a broken file shows on the first local run
    if in_ci():
        config.pluginmanager.register(SkipGuard(path, allowed), "crashsafe-skip-guard")
