"""A real HTTP server on 127.0.0.1 in a thread, answering from a function you control."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Recorded", "Reply", "serve"]


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What to answer: ``body`` is sent as JSON unless it is bytes/str."""

    status: int = 200
    body: Any = field(default_factory=dict)


@dataclass
class Server:
    url: str
    requests: list[Recorded]
    handler: list[Callable[[Recorded], Reply]]

    def answer(self, handler: Callable[[Recorded], Reply]) -> None:
        self.handler[0] = handler


@contextmanager
def serve(handler: Callable[[Recorded], Reply] | None = None) -> Iterator[Server]:
    """Start a server; ``server.answer(fn)`` changes its behaviour while it runs."""
    server = Server(url="", requests=[], handler=[handler or (lambda _r: Reply())])

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            recorded = Recorded(self.command, self.path, dict(self.headers), self.rfile.read(length))
            server.requests.append(recorded)
            reply = server.handler[0](recorded)
            body = reply.body
            data = (
                body
                if isinstance(body, bytes)
                else body.encode()
                if isinstance(body, str)
                else json.dumps(body).encode()
            )
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _handle

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
