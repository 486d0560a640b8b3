"""A client-side bound on each store round trip, for a server that accepts and never answers.

The server's ``statement_timeout`` cancels a statement stuck behind a lock, but a server that is
hung (or a network path that swallows packets while the connection stays open) enforces nothing:
the driver's blocking read waits forever, and TCP keepalives do not help while the far kernel
still acknowledges. So each statement on a store connection is armed here with a deadline; one
watcher thread per process shuts the connection's socket down when a deadline passes, which
ends the driver's wait with an error that :meth:`Db.execute` turns into a clear ``StoreError``.
Arming and disarming cost a lock and a dict operation; the watcher sleeps until the earliest
deadline (docs/design.md, "Store").
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["Armed", "armed", "cut_socket"]

log = logging.getLogger(__name__)


class Armed:
    """One armed round trip: ``fired`` tells whether its deadline cut it short."""

    __slots__ = ("cut", "deadline", "fired")

    def __init__(self, deadline: float, cut: Callable[[], None]) -> None:
        self.deadline = deadline
        self.cut = cut
        self.fired = False


class _Watcher:
    """The process's one thread that cuts connections whose round trip outlived its deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, Armed] = {}
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._wake_at = float("inf")

    def arm(self, armed: Armed) -> int:
        ident = next(self._ids)
        with self._cond:
            self._armed[ident] = armed
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="crashsafe-store-deadlines", daemon=True
                )
                self._thread.start()
            if armed.deadline < self._wake_at:
                self._cond.notify()
        return ident

    def disarm(self, ident: int) -> None:
        with self._cond:
            self._armed.pop(ident, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [i for i, a in self._armed.items() if a.deadline <= now]
                expired = [self._armed.pop(i) for i in due]
                for armed in expired:
                    armed.fired = True
                self._wake_at = min((a.deadline for a in self._armed.values()), default=float("inf"))
                if not expired:
                    wait = None if self._wake_at == float("inf") else self._wake_at - now
                    self._cond.wait(wait)
                    continue
            for armed in expired:
                try:
                    armed.cut()
                except Exception:  # the watcher must outlive any one connection's trouble
                    log.debug("crashsafe: cutting a store connection failed", exc_info=True)


_watcher = _Watcher()


def _after_fork_in_child() -> None:
    """A forked child (LocalExecutor worker, task process) gets a fresh watcher.

    The parent's watcher thread does not exist in the child, and its lock may have been held at
    the fork: reusing it could block the child's first store statement forever.
    """
    global _watcher
    _watcher = _Watcher()


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def armed(seconds: float, cut: Callable[[], None]) -> Iterator[Armed]:
    """Run the block with ``cut()`` called from the watcher thread if it lasts over ``seconds``."""
    state = Armed(time.monotonic() + seconds, cut)
    ident = _watcher.arm(state)
    try:
        yield state
    finally:
        _watcher.disarm(ident)


def cut_socket(fileno: int) -> None:
    """Shut down the socket behind ``fileno`` both ways: a read blocked on it returns at once.

    ``shutdown`` acts on the socket, not on the descriptor, so a duplicate is enough, and the
    driver's own descriptor stays valid until the driver closes it.
    """
    dup = socket.socket(fileno=os.dup(fileno))
    try:
        dup.shutdown(socket.SHUT_RDWR)
    finally:
        dup.close()
