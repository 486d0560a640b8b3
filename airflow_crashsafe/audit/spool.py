"""A local spool of audit events the store could not take in time; drained on a later write.

One JSON line per event, one file per writing process, under ``$AIRFLOW_HOME/crashsafe-spool``.
Appending holds an exclusive ``flock`` and re-opens when a drainer renamed the file away, so no
line can land in a file that is being drained. A drainer claims a file by renaming it, applies
every line (events merge idempotently, so a line delivered twice is harmless) and deletes it;
what it could not deliver goes back to the spool. Lines survive a killed process (the OS keeps
written data); only a crash of the machine itself can lose the last unflushed lines.

A line that can never be stored - unreadable, a field of the wrong type (``"pid": "12ab"``), or
refused by the store as bad data - is quarantined in a ``*.poison`` file beside the spool (logged
once per file) and the lines after it are delivered: one bad line must not block its file forever.

A claimed file is named after its drainer's pid. Drainers are mostly task processes, which end
with ``os._exit()`` and may die mid-drain; a claimed file whose drainer is gone is drained again at
once (older names without a pid, and files of a pid alive again, after five minutes), so events a
dying drainer had claimed do not stay hidden from the audit.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import time
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_crashsafe.audit.events import AttemptEvent

if TYPE_CHECKING:
    from airflow_crashsafe.store.store import Store

__all__ = ["Spool", "default_spool_dir", "is_bad_data", "parse_line"]

log = logging.getLogger(__name__)
_ABANDONED_DRAIN_SECONDS = 300.0


def default_spool_dir() -> Path:
    """``$AIRFLOW_HOME/crashsafe-spool`` (``~/airflow`` when AIRFLOW_HOME is unset)."""
    home = os.environ.get("AIRFLOW_HOME") or str(Path("~/airflow").expanduser())
    return Path(home) / "crashsafe-spool"


def parse_line(line: bytes) -> AttemptEvent:
    """One spool line as an event; ``ValueError`` when it is not one (malformed, wrongly typed)."""
    try:
        event = AttemptEvent.from_json(json.loads(line))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an audit event ({exc})") from None
    for name, allowed in _field_types().items():
        value = getattr(event, name)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise ValueError(f"field {name!r} is {value!r}, not {' or '.join(t.__name__ for t in allowed)}")
    return event


@functools.cache
def _field_types() -> dict[str, tuple[type, ...]]:
    """Each event field's allowed runtime types, from its annotation (``int | None`` → int, None)."""
    hints = typing.get_type_hints(AttemptEvent)
    found: dict[str, tuple[type, ...]] = {}
    for field in fields(AttemptEvent):
        found[field.name] = _runtime_types(hints[field.name])
    return found


def _runtime_types(hint: Any) -> tuple[type, ...]:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return tuple({type(v) for v in typing.get_args(hint)})
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _runtime_types(arg))
    if hint is type(None) or hint is None:
        return (type(None),)
    return (hint,) if isinstance(hint, type) else (object,)


def is_bad_data(exc: BaseException) -> bool:
    """Whether the store refused an event for its own content, so retrying it can never succeed.

    SQLSTATE classes 22 (data exception) and 23 (integrity violation), or a value the driver
    cannot adapt; a store that is down, slow or locked is not bad data and is retried later.
    """
    sqlstate = str(getattr(exc, "sqlstate", "") or "")
    if sqlstate[:2] in {"22", "23"}:
        return True
    return isinstance(exc, TypeError | ValueError) and not hasattr(exc, "sqlstate")


class Spool:
    """Append-only event files in ``directory``; ``drain(apply)`` delivers them."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._name = f"events-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"

    @property
    def path(self) -> Path:
        return self.directory / self._name

    def append(self, events: list[AttemptEvent]) -> None:
        """Append events durably enough to survive this process being killed."""
        data = "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in events).encode()
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(5):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:  # a drainer renamed the file between our open and our lock: write a new one
                    if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                        continue
                except FileNotFoundError:
                    continue
                os.write(fd, data)
                return
            finally:
                os.close(fd)
        raise OSError(f"could not append to the crashsafe spool {self.path}")

    def pending_files(self) -> list[Path]:
        """Spooled files, plus files a drainer claimed and then died with (older than 5 min)."""
        if not self.directory.is_dir():
            return []
        stale = time.time() - _ABANDONED_DRAIN_SECONDS
        abandoned = []
        for path in self.directory.glob("events-*.draining"):
            with contextlib.suppress(OSError):
                if not _drainer_alive(path) or path.stat().st_mtime < stale:
                    abandoned.append(path)
        return sorted(self.directory.glob("events-*.jsonl")) + sorted(abandoned)

    def count(self) -> int:
        """How many events wait in the spool (all processes' files)."""
        total = 0
        for path in self.pending_files() + sorted(self.directory.glob("*.draining")):
            with contextlib.suppress(OSError):
                total += sum(1 for line in path.read_bytes().splitlines() if line.strip())
        return total

    def drain(self, apply: Callable[[AttemptEvent], None], *, stop: Callable[[], bool] | None = None) -> int:
        """Deliver every spooled event through ``apply``; returns how many were delivered.

        Stops at the first failure, or between two events once ``stop()`` is true, putting the rest
        back; raises nothing but what ``apply`` would.
        """
        delivered = 0
        for path in self.pending_files():
            if stop is not None and stop():
                break
            claimed = path.with_name(
                f"{path.name.split('.')[0]}.{os.getpid()}-{uuid.uuid4().hex[:8]}.draining"
            )
            try:
                os.rename(path, claimed)
            except FileNotFoundError:
                continue  # another process claimed it
            fd = os.open(claimed, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # wait for an append already under way
                lines = [ln for ln in claimed.read_bytes().splitlines() if ln.strip()]
                events: list[AttemptEvent] = []
                poison: list[tuple[bytes, str]] = []
                for line in lines:
                    try:
                        events.append(parse_line(line))
                    except ValueError as exc:
                        poison.append((line, str(exc)))
                done = 0
                try:
                    for event in events:
                        if stop is not None and stop():
                            break
                        try:
                            apply(event)
                        except Exception as exc:
                            if not is_bad_data(exc):
                                raise
                            poison.append((json.dumps(event.to_json(), sort_keys=True).encode(), repr(exc)))
                        else:
                            delivered += 1
                        done += 1
                finally:
                    self._quarantine(claimed, poison)
                    if done < len(events):
                        self.append(events[done:])
                    with contextlib.suppress(FileNotFoundError):  # re-claimed as abandoned
                        os.unlink(claimed)
            finally:
                os.close(fd)
        return delivered

    def _quarantine(self, claimed: Path, poison: list[tuple[bytes, str]]) -> None:
        """Append lines that can never be stored to ``<file>.poison`` beside the spool; log it once."""
        if not poison:
            return
        target = claimed.with_name(claimed.name.split(".")[0] + ".poison")
        with open(target, "ab") as out:
            for line, _ in poison:
                out.write(line.rstrip(b"\n") + b"\n")
        log.error(
            "crashsafe audit: %d spooled event(s) can never be stored (first: %s); moved to %s, the "
            "others are delivered. Inspect and delete that file.",
            len(poison),
            poison[0][1][:300],
            target,
        )


def _drainer_alive(claimed: Path) -> bool:
    """Whether the process named in a claimed file's name (``events-*.<pid>-<hex>.draining``) lives.

    True when the name carries no pid (an older drainer's): those wait for the five-minute rule.
    """
    parts = claimed.name.split(".")
    pid = parts[1].split("-")[0] if len(parts) == 3 and "-" in parts[1] else ""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


def deliver(store: Store, directory: Path) -> int:
    """Apply every spooled event under ``directory`` to ``store`` now; how many were delivered.

    For those who read the audit after the tasks are gone (``audit reconcile``, the drill): a
    task process that exited right after spooling left its events for the next drainer.
    """
    from airflow_crashsafe.store.attempts import AttemptLog

    if not directory.is_dir():
        return 0
    return Spool(directory).drain(AttemptLog(store).apply)
