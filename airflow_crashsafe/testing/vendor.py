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

import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_crashsafe.testing.http import LocalServer, Received, Reply

__all__ = ["KeyHonouringVendor", "NaiveVendor", "Received"]


class _Vendor:
    """Shared bookkeeping on a :class:`~airflow_crashsafe.testing.http.LocalServer`; subclasses answer."""

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
        self._server = LocalServer(self._handle)

    @property
    def bookings(self) -> int:
        with self._lock:
            return len(self.booked)

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> _Vendor:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> _Vendor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, request: Received) -> Reply:
        if request.method not in ("POST", "PUT"):
            return Reply(501, {"error": f"unsupported method {request.method}"})
        with self._lock:
            self.received.append(request)
            scripted = self.scripted_statuses.pop(0) if self.scripted_statuses else None
        if self.on_request is not None:
            self.on_request(request)
        if scripted is not None:
            return Reply(scripted, {"error": "scripted"})
        status, body = self.answer(request)
        return Reply(status, body)

    def _book(self, request: Received) -> dict[str, Any]:
        if self.on_book is not None:
            self.on_book(request)
        if self.processing_seconds:
            time.sleep(self.processing_seconds)
        with self._lock:
            self.booked.append(request)
            number = len(self.booked)
        return {"payment_id": f"pay_{number}", "booked": True}

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
