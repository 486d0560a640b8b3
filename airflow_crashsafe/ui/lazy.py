"""An ASGI app that builds the real one on first use.

The plugin module is imported by every Airflow process (scheduler, workers, each task runner), but
only the api-server ever serves a request. Building the FastAPI app at import time would cost every
task process the import of FastAPI, Jinja2 and the routes; behind this wrapper it costs nothing
until the first request reaches ``/crashsafe``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["LazyApp"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class LazyApp:
    """ASGI callable standing for ``"module:factory"``; the factory runs once, on the first call."""

    def __init__(self, target: str) -> None:
        self.target = target
        self._app: Asgi | None = None
        self._lock = threading.Lock()

    def build(self) -> Asgi:
        """The real app (built now if it was not yet)."""
        if self._app is None:
            with self._lock:
                if self._app is None:
                    module, _, factory = self.target.partition(":")
                    self._app = getattr(importlib.import_module(module), factory)()
        return self._app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.build()(scope, receive, send)
