"""Connections that an abandoned delivery attempt can cut off.

The dispatcher runs each attempt on a thread of its own and gives up at the sink's deadline, but
a thread cannot be killed: one blocked reading from a sink that drips its answer would linger for
as long as the sink keeps dripping. So the sockets an attempt opens (HTTP through
:func:`closable_session`, SMTP through :class:`SMTP` / :class:`SMTP_SSL`) are remembered under
the attempt's thread, and :func:`cut` shuts them down, which wakes the blocked read at once.
Each attempt runs on a fresh thread, so a thread id names exactly one attempt while it lives.
"""

from __future__ import annotations

import contextlib
import smtplib
import socket
import threading
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

__all__ = ["SMTP", "SMTP_SSL", "closable_session", "cut", "forget", "remember"]

_sockets: dict[int, list[socket.socket]] = {}
_lock = threading.Lock()


def remember(sock: socket.socket | None) -> None:
    """Note ``sock`` as used by the calling thread's attempt."""
    if sock is not None:
        with _lock:
            _sockets.setdefault(threading.get_ident(), []).append(sock)


def forget() -> None:
    """The calling thread's attempt is over: drop what it noted."""
    with _lock:
        _sockets.pop(threading.get_ident(), None)


def cut(thread_id: int | None) -> int:
    """Shut down every socket of the attempt running on ``thread_id``; how many were shut."""
    with _lock:
        sockets = _sockets.pop(thread_id, []) if thread_id is not None else []
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    return len(sockets)


class _Http(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        remember(self.sock)


class _Https(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        remember(self.sock)


class _HttpPool(HTTPConnectionPool):
    ConnectionCls = _Http


class _HttpsPool(HTTPSConnectionPool):
    ConnectionCls = _Https


class _Adapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HttpPool, "https": _HttpsPool}


def closable_session() -> requests.Session:
    """A ``requests`` session whose direct connections :func:`cut` can shut down.

    (Through a proxy the connection is not tracked: the attempt is still abandoned, not cut.)
    """
    session = requests.Session()
    adapter = _Adapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class SMTP(smtplib.SMTP):
    """``smtplib.SMTP`` whose socket is remembered for :func:`cut`."""

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:  # what connect() calls
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]  # not in typeshed
        remember(sock)
        return sock


class SMTP_SSL(smtplib.SMTP_SSL):
    """``smtplib.SMTP_SSL`` whose socket is remembered for :func:`cut`."""

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:  # what connect() calls
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]  # not in typeshed
        remember(sock)
        return sock
