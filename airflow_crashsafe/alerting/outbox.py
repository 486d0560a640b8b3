"""A durable spool of alert deliveries that have not succeeded yet.

One JSON object per line, one line per (alert, sink). The dispatcher writes an alert here
*before* it tries to send it, so a crash between deciding and delivering loses nothing; a
delivered line is removed by rewriting the file atomically (temp file, fsync, rename). An
advisory ``flock`` on a sibling ``.lock`` file keeps two processes sharing a spool from
interleaving. :class:`MemoryOutbox` is the same without a file, for library use that accepts
losing undelivered alerts on exit.

A line that is not a valid entry (torn by a crash, edited by hand, written by another version)
is moved to ``<outbox>.quarantine`` with a warning and the rest is delivered: one bad line must
never stop a sink from receiving every later alert.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from airflow_crashsafe.alerting.model import Alert

__all__ = ["FileOutbox", "MemoryOutbox", "Outbox", "atomic_write_text", "entry_problem"]

log = logging.getLogger(__name__)

Entry = dict[str, Any]


def entry_problem(entry: Any) -> str | None:
    """Why ``entry`` cannot be delivered (None when it can): the dispatcher relies on its shape."""
    if not isinstance(entry, dict):
        return f"not a JSON object but {type(entry).__name__}"
    for key in ("id", "sink"):
        if not isinstance(entry.get(key), str):
            return f"'{key}' missing or not a string"
    if not isinstance(entry.get("alert"), dict):
        return "'alert' missing or not an object"
    for key in ("attempts", "queued_at", "next_try_at"):
        value = entry.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"'{key}' is not a number"
    try:
        Alert.from_dict(entry["alert"])
    except Exception as exc:  # any shape problem in the alert: KeyError, ValueError, ConfigurationError
        return f"'alert' unreadable: {type(exc).__name__}: {exc}"[:300]
    return None


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old or the new file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable (POSIX)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class Outbox:
    """Interface: ``locked()`` guards a load-modify-replace cycle; entries are plain dicts."""

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        yield

    def append(self, entries: Sequence[Entry]) -> None:
        raise NotImplementedError

    def load(self) -> list[Entry]:
        raise NotImplementedError

    def replace(self, entries: Sequence[Entry]) -> None:
        raise NotImplementedError


class MemoryOutbox(Outbox):
    """Keeps pending deliveries in this process only."""

    def __init__(self) -> None:
        self._entries: list[Entry] = []

    def append(self, entries: Sequence[Entry]) -> None:
        self._entries.extend(dict(e) for e in entries)

    def load(self) -> list[Entry]:
        return [dict(e) for e in self._entries]

    def replace(self, entries: Sequence[Entry]) -> None:
        self._entries = [dict(e) for e in entries]


class FileOutbox(Outbox):
    """Pending deliveries in a JSON-lines file (created on first use)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as handle:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - not POSIX: one process per spool
                yield
                return
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            for entry in entries:
                handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    @property
    def quarantine_path(self) -> Path:
        return self.path.with_name(self.path.name + ".quarantine")

    def load(self) -> list[Entry]:
        """The valid entries; invalid lines are moved to :attr:`quarantine_path` (call it locked)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        entries: list[Entry] = []
        bad: list[str] = []
        for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                problem: str | None = "not JSON (a line torn by a crash?)"
            else:
                problem = entry_problem(entry)
            if problem is None:
                entries.append(entry)
                continue
            log.warning(
                "alert outbox %s line %d skipped: %s; moved to %s",
                self.path,
                number,
                problem,
                self.quarantine_path,
            )
            bad.append(line)
        if bad:
            with open(self.quarantine_path, "a", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in bad))
                handle.flush()
                os.fsync(handle.fileno())
            self.replace(entries)
        return entries

    def replace(self, entries: Sequence[Entry]) -> None:
        atomic_write_text(self.path, "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))
