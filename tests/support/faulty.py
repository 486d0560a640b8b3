"""Endpoints that misbehave on real sockets: HTTP ones that drip or never answer, and a TCP proxy
that can start swallowing everything while its connections stay open (a hung server or network).

``http.server`` always answers at once, so these speak raw TCP: each accepted connection has its
request read, then is handed to a behaviour (``drip(...)`` or ``silent``) on a daemon thread.
Stopping the server closes every connection, which ends the behaviours.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator

__all__ = ["BlackholeProxy", "FaultyServer", "drip", "faulty", "silent"]

Behaviour = Callable[[socket.socket, threading.Event], None]


def drip(response: bytes, every: float) -> Behaviour:
    """Send ``response`` one byte every ``every`` seconds (status line and headers included)."""

    def behave(conn: socket.socket, stop: threading.Event) -> None:
        for byte in response:
            if stop.wait(every):
                return
            conn.sendall(bytes([byte]))

    return behave


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accept the request and never answer (noticing when the client hangs up)."""
    conn.settimeout(0.1)
    while not stop.is_set():
        try:
            if not conn.recv(1):
                raise ConnectionResetError("client hung up")
        except TimeoutError:
            continue


class FaultyServer:
    """A TCP server on 127.0.0.1; ``url``, ``requests`` (raw request heads) and ``stop()``."""

    def __init__(self, behaviour: Behaviour) -> None:
        self._behaviour = behaviour
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()  # an accept racing stop() must not leave its socket open
        self.requests: list[bytes] = []
        #: Connections the client closed while the behaviour was still answering.
        self.hung_up = threading.Event()
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._stop.is_set():
                    conn.close()
                    return
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    raise ConnectionResetError("client hung up before its request was complete")
                head += chunk
            self.requests.append(head)
            self._behaviour(conn, self._stop)
        except OSError:
            if not self._stop.is_set():
                self.hung_up.set()

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            conns = list(self._conns)
        self._listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


@contextlib.contextmanager
def faulty(behaviour: Behaviour) -> Iterator[FaultyServer]:
    """Run a :class:`FaultyServer` for the ``with`` block."""
    server = FaultyServer(behaviour)
    try:
        yield server
    finally:
        server.stop()


class BlackholeProxy:
    """A TCP proxy on 127.0.0.1 to ``(host, port)``; after :meth:`blackhole` it forwards nothing.

    Its connections stay open and every byte sent is accepted (the kernel acknowledges it), but
    none reaches the other side: a server that answered the start-up and then hung mid-query.
    """

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._holed = threading.Event()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def blackhole(self, on: bool = True) -> None:
        """Swallow (True) or forward again (False) everything, on every connection."""
        if on:
            self._holed.set()
        else:
            self._holed.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._socks += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                if not self._holed.is_set():
                    dst.sendall(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._listener.close()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
