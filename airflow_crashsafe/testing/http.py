"""A real HTTP server on 127.0.0.1 in a background thread, answering from a function you control.

For testing what crashsafe (or your code) sends over HTTP without a mock in between: alert sinks,
webhooks, a vendor that answers 500 on the first call, an api-server that is slow. Every request is
recorded; the answering function can be swapped while the server runs::

    from airflow_crashsafe.testing.http import Reply, serve

    with serve(lambda request: Reply(201, {"id": 1})) as server:
        ...  # point an HTTP connection or a sink at server.url
        server.answer(lambda request: Reply(503))
        ...
    assert server.requests[0].json() == {"amount": 10}

:class:`~airflow_crashsafe.testing.vendor.KeyHonouringVendor` and
:class:`~airflow_crashsafe.testing.vendor.NaiveVendor` are built on it.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LocalServer", "Received", "Reply", "serve"]


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Reply:
    """What to answer: ``body`` is sent as JSON unless it is bytes or str."""

    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


def _ok(_request: Received) -> Reply:
    return Reply()


class LocalServer:
    """The server: ``url`` to call, ``requests`` received so far, ``answer(fn)`` to change replies.

    ``start()``/``stop()`` or a ``with`` block; GET, POST, PUT, PATCH and DELETE are answered.
    With ``tls`` (a server context) it is also an HTTPS proxy that is its own destination: it
    answers ``CONNECT`` (recorded too) and serves the requests inside the tunnel over TLS
    (:mod:`~airflow_crashsafe.testing.tls` builds the context and says how clients reach it).
    """

    def __init__(
        self, handler: Callable[[Received], Reply] | None = None, *, tls: ssl.SSLContext | None = None
    ) -> None:
        self.requests: list[Received] = []
        self._handler = handler or _ok
        self._tls = tls
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._url = ""

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; still readable after ``stop()``, for assertions."""
        assert self._url, "start the server first"
        return self._url

    def answer(self, handler: Callable[[Received], Reply]) -> None:
        """Answer the next requests with ``handler``."""
        self._handler = handler

    def start(self) -> LocalServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = Received(
                    self.command, self.path, dict(self.headers.items()), self.rfile.read(length)
                )
                with server._lock:
                    server.requests.append(request)
                reply = server._handler(request)
                server._send(self, reply)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def do_CONNECT(self) -> None:
                with server._lock:
                    server.requests.append(Received("CONNECT", self.path, dict(self.headers.items()), b""))
                if server._tls is None:
                    server._send(self, Reply(405, {"error": "not a proxy"}))
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                try:
                    tunnel = server._tls.wrap_socket(self.connection, server_side=True)
                except (ssl.SSLError, OSError):
                    self.close_connection = True  # e.g. a host the certificate does not name
                    return
                self.connection, self.close_connection = tunnel, False
                self.rfile, self.wfile = tunnel.makefile("rb"), tunnel.makefile("wb")

            def finish(self) -> None:
                super().finish()
                if isinstance(self.connection, ssl.SSLSocket):  # the tunnel took over the socket
                    self.connection.close()

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        host, port = self._httpd.server_address[:2]
        self._url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
        data = reply.encoded()
        try:
            handler.send_response(reply.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller died mid-request: exactly what crash tests do


@contextmanager
def serve(handler: Callable[[Received], Reply] | None = None) -> Iterator[LocalServer]:
    """Run a :class:`LocalServer` for the ``with`` block (default answer: 200 ``{}``)."""
    with LocalServer(handler) as server:
        yield server
