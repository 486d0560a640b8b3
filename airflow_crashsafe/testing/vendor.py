"""A real local payment vendor to test against: one that honours idempotency keys, one that does not.

``KeyHonouringVendor`` follows the IETF Idempotency-Key draft: the first request with a key is
processed and its response stored; a repeat with the same key and payload gets the stored response;
a repeat while the first is still processing gets 409; the same key with another payload gets 422.
``NaiveVendor`` books every request it receives. Both count bookings, so a test can assert that a
payment was booked once. They listen on 127.0.0.1 in a background thread::

    with KeyHonouringVendor() as vendor:
        ...  # point an HTTP connection at vendor.url
        assert vendor.bookings == 1
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["KeyHonouringVendor", "NaiveVendor", "Received"]


@dataclass
class Received:
    """One request as the vendor saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class _Vendor:
    """Shared server plumbing; subclasses decide how a request is answered."""

    key_header = "Idempotency-Key"

    def __init__(self, *, processing_seconds: float = 0.0) -> None:
        self.processing_seconds = processing_seconds
        self.received: list[Received] = []
        self.booked: list[Received] = []
        #: Called with each request before it is answered (tests use it to crash the caller).
        self.on_request: Callable[[Received], None] | None = None
        #: Called with each request about to be booked, before it is (the crash drill holds it here).
        self.on_book: Callable[[Received], None] | None = None
        #: Status codes to answer instead of processing, one per request, consumed in order.
        self.scripted_statuses: list[int] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def bookings(self) -> int:
        with self._lock:
            return len(self.booked)

    @property
    def url(self) -> str:
        assert self._server is not None, "start the vendor first"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> _Vendor:
        vendor = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                vendor._handle(self)

            do_PUT = do_POST

            def log_message(self, format: str, *args: Any) -> None:  # quiet test output
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> _Vendor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        request = Received(
            handler.command, handler.path, dict(handler.headers.items()), handler.rfile.read(length)
        )
        with self._lock:
            self.received.append(request)
            scripted = self.scripted_statuses.pop(0) if self.scripted_statuses else None
        if self.on_request is not None:
            self.on_request(request)
        if scripted is not None:
            self._reply(handler, scripted, {"error": "scripted"})
            return
        status, body = self.answer(request)
        self._reply(handler, status, body)

    def _book(self, request: Received) -> dict[str, Any]:
        if self.on_book is not None:
            self.on_book(request)
        if self.processing_seconds:
            time.sleep(self.processing_seconds)
        with self._lock:
            self.booked.append(request)
            number = len(self.booked)
        return {"payment_id": f"pay_{number}", "booked": True}

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller died mid-request: exactly what crash tests do

    def answer(self, request: Received) -> tuple[int, Any]:
        raise NotImplementedError


class NaiveVendor(_Vendor):
    """Books every request: two deliveries mean two payments."""

    def answer(self, request: Received) -> tuple[int, Any]:
        return 201, self._book(request)


class KeyHonouringVendor(_Vendor):
    """Honours the Idempotency-Key header as the IETF draft describes."""

    def __init__(self, *, processing_seconds: float = 0.0) -> None:
        super().__init__(processing_seconds=processing_seconds)
        self._by_key: dict[str, tuple[bytes, tuple[int, Any] | None]] = {}

    def answer(self, request: Received) -> tuple[int, Any]:
        key = request.headers.get(self.key_header)
        if not key:
            return 400, {"error": f"missing {self.key_header} header"}
        with self._lock:
            seen = self._by_key.get(key)
            if seen is None:
                self._by_key[key] = (request.body, None)
        if seen is not None:
            body, response = seen
            if body != request.body:
                return 422, {"error": "idempotency key reused with a different payload"}
            if response is None:
                return 409, {"error": "original request still in progress"}
            return response
        response = (201, self._book(request))
        with self._lock:
            self._by_key[key] = (request.body, response)
        return response
